//! RFTL's jobs across a clean close. Checkpoints carry, as the scheme's state, the logical
//! blocks with a reclaim job under way: their roles and the job (one a step is holding just
//! then is left out, and all of them if they would not fit the checkpoint area). A clean open (nothing
//! programmed after that checkpoint) takes them back, so the jobs go on a step per host page
//! as before the close; without this, each such logical block was compacted at open (a whole
//! block's copies: every logical block of a full device has a job under way, and the open
//! of one took seconds). Nothing read back is trusted: a logical block's saved state is
//! taken only if it keeps the scheme's rules (`RftlScheme::lbn_rules`) and agrees with the
//! medium and the map (`RftlScheme::take_saved`); otherwise it is rebuilt, or compacted, as
//! after a crash.
//!
//! Words (u32): `MAGIC, count`, then per logical block `lbn`, the primary, buffer and
//! replacement (each `block, next`, or `NONE, 0`), the job (`kind | dest << 8`: kind 1 fold,
//! 2 shift; dest 0 the replacement, 1 the buffer), its `steps`, its sources (a count, then
//! `block, limit` pairs, `NONE` for a limit not fixed yet) and the blocks it erases (a count,
//! then `block, retire` pairs).

use super::lbn::{Dest, Job, JobKind, LbnState};
use crate::layout::BlockIdx;
use crate::schemes::block_ops::Blk;

const MAGIC: u32 = 0x5246_4a31;
const NONE: u32 = u32::MAX;
/// Most sources or erases a job lists (a logical block has at most three blocks).
const MAX_LIST: u32 = 3;

/// The words for `jobs` (logical blocks with a fold or shift under way); empty when there
/// are none, so the checkpoint stays in the format every build reads.
pub(super) fn encode(jobs: &[(u32, LbnState)]) -> Vec<u32> {
    // Only folds and shifts: a compaction runs to its end at once, never seen between steps.
    let jobs: Vec<(u32, &LbnState, &Job)> = jobs
        .iter()
        .filter_map(|(l, st)| Some((*l, st, st.job.as_ref()?)))
        .filter(|(_, _, j)| j.kind != JobKind::Compact)
        .collect();
    if jobs.is_empty() {
        return Vec::new();
    }
    let mut w = vec![MAGIC, jobs.len() as u32];
    for (lbn, st, job) in jobs {
        w.push(lbn);
        for blk in [st.primary, st.buffer, st.replacement] {
            match blk {
                Some(b) => w.extend([b.block.0, b.next]),
                None => w.extend([NONE, 0]),
            }
        }
        let kind = match job.kind {
            JobKind::Fold => 1,
            JobKind::Shift => 2,
            // (Filtered out above; a 0 would make `decode` refuse the whole state.)
            JobKind::Compact => 0,
        };
        let dest = match job.dest {
            Dest::Replacement => 0,
            Dest::Buffer => 1,
        };
        w.extend([kind | dest << 8, job.steps, job.sources.len() as u32]);
        for (b, lim) in &job.sources {
            w.extend([b.0, lim.unwrap_or(NONE)]);
        }
        w.push(job.erase.len() as u32);
        for (b, retire) in &job.erase {
            w.extend([b.0, u32::from(*retire)]);
        }
    }
    w
}

/// Reads the words back: `(lbn, state)` for each logical block, as written. `None` if they
/// do not parse (wrong magic, cut short, a field out of its range, a logical block past
/// `lbns` or listed twice); each state is still to be checked against the rules and the
/// medium. Never panics, whatever the words.
pub(super) fn decode(words: &[u32], lbns: u32) -> Option<Vec<(u32, LbnState)>> {
    let mut it = words.iter().copied();
    let mut next = || it.next();
    if words.is_empty() {
        return Some(Vec::new());
    }
    if next()? != MAGIC {
        return None;
    }
    let count = next()?;
    if count > lbns {
        return None;
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let lbn = next()?;
        if lbn >= lbns || !seen.insert(lbn) {
            return None;
        }
        let mut roles = [None; 3];
        for r in &mut roles {
            let (block, n) = (next()?, next()?);
            *r = (block != NONE).then_some(Blk {
                block: BlockIdx(block),
                next: n,
            });
        }
        let kd = next()?;
        let kind = match kd & 0xff {
            1 => JobKind::Fold,
            2 => JobKind::Shift,
            _ => return None,
        };
        let dest = match kd >> 8 {
            0 => Dest::Replacement,
            1 => Dest::Buffer,
            _ => return None,
        };
        let steps = next()?;
        let n = next()?;
        if n == 0 || n > MAX_LIST {
            return None;
        }
        let mut sources = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (b, lim) = (next()?, next()?);
            sources.push((BlockIdx(b), (lim != NONE).then_some(lim)));
        }
        let n = next()?;
        if n > MAX_LIST {
            return None;
        }
        let mut erase = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (b, retire) = (next()?, next()?);
            if retire > 1 {
                return None;
            }
            erase.push((BlockIdx(b), retire == 1));
        }
        let [primary, buffer, replacement] = roles;
        out.push((
            lbn,
            LbnState {
                primary,
                buffer,
                replacement,
                job: Some(Job {
                    kind,
                    sources,
                    erase,
                    dest,
                    steps,
                }),
            },
        ));
    }
    // Words past the last logical block: not what was written.
    if next().is_some() {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold() -> LbnState {
        let mut s = LbnState {
            primary: Some(Blk {
                block: BlockIdx(4),
                next: 8,
            }),
            buffer: Some(Blk {
                block: BlockIdx(9),
                next: 5,
            }),
            ..LbnState::default()
        };
        s.start_fold(BlockIdx(2));
        s
    }

    /// States come back as written (a fold before its first step has a source unfixed),
    /// and any change that breaks the framing is refused, never a panic.
    #[test]
    fn states_round_trip_and_damage_is_refused() {
        let mut shifted = fold();
        if let Some(j) = shifted.job.as_mut() {
            j.sources[1].1 = Some(5);
            j.steps = 3;
        }
        shifted.replacement = Some(Blk {
            block: BlockIdx(2),
            next: 6,
        });
        assert!(shifted.end_fold(Some(BlockIdx(7))));
        let jobs = vec![(3, fold()), (5, shifted)];
        let w = encode(&jobs);
        let back = decode(&w, 8).expect("decodes");
        assert_eq!(back.len(), 2);
        for ((l, a), (m, b)) in jobs.iter().zip(&back) {
            assert_eq!(l, m);
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
        assert_eq!(decode(&[], 8).map(|v| v.len()), Some(0));
        assert!(encode(&[]).is_empty());
        // A logical block past the device, a cut, a trailing word, a bad magic.
        assert!(decode(&w, 5).is_none());
        assert!(decode(&w[..w.len() - 1], 8).is_none());
        assert!(decode(&[&w[..], &[0]].concat(), 8).is_none());
        let mut bad = w.clone();
        bad[0] ^= 1;
        assert!(decode(&bad, 8).is_none());
        // Every single-word change: refused or decoded, never a panic.
        for i in 0..w.len() {
            for v in [0, 1, 2, 3, 4, 255, 256, 257, u32::MAX, u32::MAX - 1] {
                let mut x = w.clone();
                x[i] = v;
                let _ = decode(&x, 8);
            }
        }
    }
}
