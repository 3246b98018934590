//! Virtual time (timing `virtual`): the background work a served device does on its own
//! threads — the scheme's workers (page GC) and the maintenance thread — runs here as actors of
//! a discrete-event simulation on the caller's thread, with the same code (`BackgroundWorker`,
//! `Maintenance`).
//!
//! Every actor has its own simulated time. [`Background::advance_to`] runs the actor whose time
//! is earliest (ties in a fixed order: workers by index, then maintenance) until every actor's
//! time is at or past the target; each round sets the device's [`nand_model::SimClock`] to the
//! actor's time, so its NAND operations start then, and its waits move the clock on. The queue
//! writers are actors too (their state is in each queue's inline writer, `writer::SimWriter`):
//! a writer's time is when it would place the next page of its inbox.
//! Host requests are the driver's business (the `replay` crate): it calls
//! [`crate::Ftl::advance_to`] with a request's arrival time, then runs the request.
//!
//! What replaces the threads' wake-ups: a worker that found nothing to do sleeps for the time
//! its thread would, but is woken early by any host activity since its last look (on a served
//! device a host write that drains a bank wakes the workers); maintenance runs on its 50 ms tick
//! and as soon as GC or a scheme asks for it. A request runs whole, but while it (or its
//! writer) waits for room the GC workers due before then run first (`Core::sim_yield`), as
//! the served device's workers clean beside a waiting writer; and a bank a worker stepped is
//! held until that step's simulated end (`PageScheme::try_gc`), as its GC mutex would be.
//! Nothing here reads the host's clock or depends on thread scheduling, so the same calls give
//! the same simulated times on any machine.

use crate::checkpoint::Maintenance;
use crate::core::Core;
use crate::schemes::BackgroundWorker;

enum Work {
    Worker(Box<dyn BackgroundWorker>),
    Maintenance(Maintenance),
}

struct Actor {
    /// When the actor acts next (simulated ns).
    at: u64,
    /// It found nothing to do: host activity wakes it before `at`.
    idle: bool,
    /// How far its last round put `at` ahead of the round's start: the period of its rounds
    /// while nothing changes (an idle worker's sleep, maintenance's tick).
    period: u64,
    /// It ran a round since the device last changed (`Background::marker`).
    ran_quiet: bool,
    work: Work,
}

/// The background actors of a virtual-time FTL.
pub(crate) struct Background {
    actors: Vec<Actor>,
    /// The device's state marker (`Background::marker`) when it last changed.
    marker: u64,
    /// The idle skip is on (the default; off only to test that it changes nothing).
    skip_idle: bool,
    /// Actor rounds run so far (tests of the skip).
    rounds: u64,
}

impl Background {
    pub(crate) fn new(core: &Core, workers: Vec<Box<dyn BackgroundWorker>>) -> Background {
        let now = core.now_ns();
        let mut actors: Vec<Actor> = workers
            .into_iter()
            .map(|w| Actor {
                at: now,
                idle: false,
                period: 0,
                ran_quiet: false,
                work: Work::Worker(w),
            })
            .collect();
        let m = Maintenance::new(core);
        actors.push(Actor {
            at: m.next_tick(),
            idle: false,
            period: 0,
            ran_quiet: false,
            work: Work::Maintenance(m),
        });
        Background {
            actors,
            marker: 0,
            skip_idle: true,
            rounds: 0,
        }
    }

    /// Actor rounds run so far.
    pub(crate) fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Turns the idle skip on or off (tests compare the two).
    pub(crate) fn set_skip_idle(&mut self, on: bool) {
        self.skip_idle = on;
    }

    /// What changes whenever the device does anything: the end of the latest NAND operation
    /// (every read, program and erase moves its bank's) and the FTL's programs and erases.
    fn marker(core: &Core) -> u64 {
        core.nand.idle_at_ns().wrapping_add(core.progress())
    }

    /// The idle skip: whether the actors' rounds from now until the host acts again change
    /// nothing. Every actor ran a round since the device last changed and that round did
    /// nothing on it; the device is idle; nothing waits in RAM for a time to pass
    /// (`Core::sim_nothing_pending`); the scheme's tick and every worker decide from state
    /// alone (`Scheme::tick_settled`, `BackgroundWorker::settled`), which did not change.
    /// Then their later rounds are the same no-ops, and skipping them moves each actor's
    /// time on along its own period exactly as running them would: the replay's figures are
    /// the same with the skip or without (tested), but a day's gap in a trace costs
    /// microseconds instead of ~15 s of rounds.
    fn quiescent(&self, core: &Core, now: u64) -> bool {
        // A read-only device's workers do not run rounds at all (see `run_until`).
        let read_only = core.is_read_only();
        self.skip_idle
            && self.actors.iter().all(|a| {
                a.ran_quiet && a.period > 0 && (a.idle || !matches!(a.work, Work::Worker(_)))
            })
            // Nothing changed since those rounds (a queue writer's placement does not clear
            // the flags: this catches it).
            && Self::marker(core) == self.marker
            // Idle: every operation ended, so no bank is held or busy for a while yet.
            && core.nand.idle_at_ns() <= now
            && core.sim_nothing_pending()
            && core.scheme.tick_settled(core)
            && self.actors.iter().all(|a| match &a.work {
                Work::Worker(w) => read_only || w.settled(core),
                Work::Maintenance(_) => true,
            })
    }

    /// Moves every actor due before `t` on by whole periods to its first round at or after
    /// `t` (see `quiescent`).
    fn skip_to(&mut self, t: u64) {
        for a in &mut self.actors {
            if a.at < t {
                let periods = (t - a.at).div_ceil(a.period);
                a.at = a.at.saturating_add(periods.saturating_mul(a.period));
                if let Work::Maintenance(m) = &mut a.work {
                    m.skip_to(a.at);
                }
            }
        }
    }

    /// Runs the background work due before `t` (simulated ns), earliest first, and leaves the
    /// clock at `t`. The clock's value on entry is when the host last acted (the previous
    /// request's completion, or `t` itself if that is later). Returns whether any actor ran.
    ///
    /// Also called while a writer or a host waits for room (`Core::sim_yield`, `nested`): then
    /// only the GC workers run. Not maintenance: a checkpoint waits for every queue's pages to
    /// be durable, which a writer in the middle of placing cannot give it until it returns (a
    /// power cut after such a checkpoint lost a flushed write). Not the queue writers: the
    /// caller may hold locks their placement takes (a hybrid merge holds its logical block
    /// while it drains a queue).
    pub(crate) fn advance_to(&mut self, core: &Core, t: u64) -> bool {
        self.run_until(core, t, false)
    }

    /// [`Background::advance_to`] from inside a writer's work (see there).
    pub(crate) fn advance_nested(&mut self, core: &Core, t: u64) -> bool {
        self.run_until(core, t, true)
    }

    fn run_until(&mut self, core: &Core, t: u64, nested: bool) -> bool {
        let Some(clock) = core.nand.sim_clock() else {
            return false;
        };
        let mut ran = false;
        let woken = clock.now_ns().min(t);
        for a in &mut self.actors {
            if matches!(a.work, Work::Worker(_)) && a.idle && a.at > woken {
                a.at = woken;
            }
        }
        if !nested {
            // The host acted since the last call: every actor looks again before a skip.
            self.marker = Self::marker(core);
            for a in &mut self.actors {
                a.ran_quiet = false;
            }
        }
        self.wake_maintenance_if_asked(core, woken);
        loop {
            if core.stopping.load(std::sync::atomic::Ordering::Acquire) {
                break;
            }
            // The earliest actor: queue writers (their time is their next page's), then the
            // workers and maintenance; ties in that order.
            let writer = (!nested)
                .then(|| {
                    core.queues
                        .iter()
                        .enumerate()
                        .filter_map(|(q, queue)| {
                            let w = queue.inline.as_ref()?.try_lock()?;
                            w.sim_next_at().map(|at| (at, q))
                        })
                        .min()
                })
                .flatten();
            let other = self
                .actors
                .iter()
                .enumerate()
                .filter(|(_, a)| !nested || matches!(a.work, Work::Worker(_)))
                .map(|(i, a)| (a.at, i))
                .min();
            match (writer, other) {
                (Some((wt, q)), o) if wt < t && o.is_none_or(|(at, _)| wt <= at) => {
                    if let Some(mut w) = core.queues[q].inline.as_ref().and_then(|w| w.try_lock()) {
                        ran |= w.sim_place_next(core);
                    }
                    // A writer stuck for space may have asked for the trim records.
                    self.wake_maintenance_if_asked(core, clock.now_ns().min(t));
                    continue;
                }
                (_, Some((at, _))) if at < t => {
                    if writer.is_none() && !nested && self.quiescent(core, at) {
                        self.skip_to(t);
                        break;
                    }
                }
                _ => break,
            }
            let Some((_, i)) = other else { break };
            let a = &mut self.actors[i];
            let start = a.at;
            clock.set_ns(start);
            // Only a round on maintenance's tick tells that its tick changes nothing (one woken
            // early by a request skips the tick).
            let tick_round = match &a.work {
                Work::Maintenance(m) => start >= m.next_tick(),
                Work::Worker(_) => true,
            };
            // Maintenance acts on its tick, whenever an early round ran (`Maintenance::round`).
            let mut period = None;
            let (idle, next) = match &mut a.work {
                // A read-only device is not cleaned (see the served device's workers).
                Work::Worker(_) if core.is_read_only() => {
                    (true, start.saturating_add(1_000_000_000))
                }
                Work::Worker(w) => match w.round(core, 1) {
                    Some(d) => {
                        let end = clock.now_ns().max(start);
                        let wait = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                        (true, end.saturating_add(wait))
                    }
                    None => (false, clock.now_ns().max(start + 1)),
                },
                Work::Maintenance(m) => {
                    m.round(core);
                    let end = clock.now_ns().max(start + 1);
                    let next = if Maintenance::requested(core) {
                        period = Some(0);
                        end
                    } else {
                        period = Some(crate::checkpoint::TICK_NS);
                        m.next_tick().max(end)
                    };
                    (false, next)
                }
            };
            a.idle = idle;
            a.at = next;
            a.period = period.unwrap_or(next.saturating_sub(start));
            ran = true;
            self.rounds += 1;
            let marker = Self::marker(core);
            if marker == self.marker {
                a.ran_quiet |= tick_round;
            } else {
                self.marker = marker;
                for other in &mut self.actors {
                    other.ran_quiet = false;
                }
            }
            // Work one actor did (a trim GC waits for, a checkpoint asked for) may be the
            // maintenance actor's business at once.
            self.wake_maintenance_if_asked(core, clock.now_ns().min(t));
        }
        clock.set_ns(t);
        ran
    }

    /// If GC or a scheme asked for maintenance (`Maintenance::requested`), it runs at `now`
    /// rather than on its next tick (the served device's `maint_wake`).
    fn wake_maintenance_if_asked(&mut self, core: &Core, now: u64) {
        if !Maintenance::requested(core) {
            return;
        }
        for a in &mut self.actors {
            if matches!(a.work, Work::Maintenance(_)) && a.at > now {
                a.at = now;
            }
        }
    }
}
