//! The write amplification a page-mapping FTL with greedy GC cannot beat under uniform random
//! 4 KiB overwrites: Xiang & Kurkoski, "An Improved Analytic Expression for Write Amplification
//! in NAND Flash" (arXiv 1110.4245), `WA = a / (a + W0(-a e^-a))` with `a = 1 + spare factor`
//! and `W0` the principal branch of the Lambert W function. ftld reports it beside the
//! measured WAF (`FtlStats::waf_limit_greedy`) so a researcher sees how far the FTL's own
//! overheads (free-block floors, open blocks, per-bank cleaning) are from the analytic limit.

/// The greedy, uniform-random WAF limit for `spare_factor` = physical space / logical space
/// - 1 (both counted in the same units). `None` for a spare factor that is not positive.
pub fn greedy_uniform_waf(spare_factor: f64) -> Option<f64> {
    if !spare_factor.is_finite() || spare_factor <= 0.0 {
        return None;
    }
    let a = 1.0 + spare_factor;
    let w = lambert_w0(-a * (-a).exp())?;
    Some(a / (a + w))
}

/// The principal branch `W0(x)` for `x` in `[-1/e, 0]` (where `W0` lies in `[-1, 0]`):
/// Halley's iteration from a start near the branch point, where the argument lies for every
/// spare factor an SSD has.
fn lambert_w0(x: f64) -> Option<f64> {
    let branch = -(-1.0f64).exp();
    if !(branch..=0.0).contains(&x) {
        return None;
    }
    if x == 0.0 {
        return Some(0.0);
    }
    // Series about the branch point: W = -1 + p - p^2/3 + 11/72 p^3, p = sqrt(2 (e x + 1)).
    let p = (2.0 * (std::f64::consts::E * x + 1.0)).max(0.0).sqrt();
    let mut w = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p;
    for _ in 0..64 {
        let ew = w.exp();
        let f = w * ew - x;
        let wp1 = w + 1.0;
        if wp1.abs() < 1e-12 {
            break;
        }
        let step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
        w -= step;
        if step.abs() < 1e-15 * (1.0 + w.abs()) {
            break;
        }
    }
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w0_solves_its_equation() {
        for x in [-0.3678, -0.36, -0.3, -0.2, -0.05, -1e-6] {
            let w = lambert_w0(x).expect("in range");
            assert!((w * w.exp() - x).abs() < 1e-12, "x {x}: w {w}");
            assert!((-1.0..=0.0).contains(&w));
        }
        assert_eq!(lambert_w0(0.1), None);
        assert_eq!(lambert_w0(-0.4), None);
    }

    #[test]
    fn limits_match_the_paper_and_the_issue() {
        // The 1 GiB default device's physical spare (issue 14: 4.68).
        let wa = greedy_uniform_waf(0.125).expect("limit");
        assert!((wa - 4.68).abs() < 0.02, "{wa}");
        // 7 % and 28 % over-provisioning.
        let wa7 = greedy_uniform_waf(0.07).expect("limit");
        let wa28 = greedy_uniform_waf(0.28).expect("limit");
        assert!((wa28 - 2.49).abs() < 0.03, "{wa28}");
        assert!(wa7 > wa && wa > wa28 && wa28 > 1.0);
        // Lots of spare: towards 1; none: no limit.
        assert!(greedy_uniform_waf(10.0).expect("limit") < 1.1);
        assert_eq!(greedy_uniform_waf(0.0), None);
    }
}
