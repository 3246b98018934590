//! Arrival-time accounting (NVMeVirt's): an operation submitted on behalf of a host request
//! starts on the timeline no earlier than the request *arrived*, not when the emulator got
//! round to submitting it, so the emulator's own processing time is absorbed into the modelled
//! latency instead of being added to it (as long as it is shorter than the device's time).
//!
//! A frontend or FTL that knows when a request arrived wraps the synchronous part that submits
//! its NAND operations in an [`ArrivalScope`]; operations submitted by that thread meanwhile
//! take `min(now, arrival)` as "now" with timing `real`. Nothing changes with timing `off`
//! (no timeline) or `virtual` (the simulation driver sets the clock to the arrival itself).
//! The scope is a thread-local and not `Send`, so it cannot be held across an `.await` of a
//! future that may move to another thread.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// The arrival of the request this thread is submitting for (0: none).
    static ARRIVAL: Cell<u64> = const { Cell::new(0) };
    /// When this thread's latest blocking [`crate::Completion::wait`] returned (0: never).
    static WAIT_END: Cell<u64> = const { Cell::new(0) };
    /// The latest wait end inside the innermost [`ArrivalScope`] (0: none yet): what its
    /// dependent submissions count from. A wait before the scope is not the scope's business
    /// (a writer's wait for an older program on another bank must not date its next page).
    static SCOPE_WAIT: Cell<u64> = const { Cell::new(0) };
}

/// When the calling thread's latest blocking wait ended, on the device clock (timing `real`);
/// 0 if it never waited. Every [`crate::Completion::wait`] counts, ending at the operation's
/// modelled completion (a late wake-up is the host's, not the device's; an operation already
/// done when waited for ended then too), and so does any wait its caller notes with
/// [`note_blocking_wait`]. A submitter that dates its
/// operations back to an arrival compares this before and after its own work: an operation
/// it issues after such a wait could not have started before the wait ended.
pub fn last_wait_end_ns() -> u64 {
    WAIT_END.with(Cell::get)
}

/// Notes that the calling thread has just finished a blocking wait of its own (a lock, a
/// sleep): see [`last_wait_end_ns`].
pub fn note_blocking_wait() {
    note_wait_end(crate::clock::now_ns());
}

pub(crate) fn note_wait_end(ns: u64) {
    // A maximum: waits on operations that ended earlier than one already waited for (several
    // reads in flight, waited in any order) must not move it back.
    WAIT_END.with(|w| w.set(w.get().max(ns)));
    SCOPE_WAIT.with(|w| w.set(w.get().max(ns)));
}

/// While alive, this thread's NAND submissions count from `arrival_ns` (see the module doc).
#[derive(Debug)]
#[must_use = "the arrival time applies only while the scope is alive"]
pub struct ArrivalScope {
    prev: u64,
    prev_wait: u64,
    _not_send: PhantomData<*const ()>,
}

impl ArrivalScope {
    /// Submissions on this thread count from `arrival_ns` (a reading of
    /// [`crate::NandDevice::now_ns`] taken when the request arrived) until the scope drops.
    pub fn enter(arrival_ns: u64) -> ArrivalScope {
        ArrivalScope {
            prev: ARRIVAL.with(|a| a.replace(arrival_ns)),
            prev_wait: SCOPE_WAIT.with(|w| w.replace(0)),
            _not_send: PhantomData,
        }
    }
}

impl Drop for ArrivalScope {
    fn drop(&mut self) {
        ARRIVAL.with(|a| a.set(self.prev));
        // The enclosing scope's dependents follow this one's waits too.
        SCOPE_WAIT.with(|w| w.set(w.get().max(self.prev_wait)));
    }
}

/// "Now" for a submission on this thread whose host clock reads `now`: inside a scope, the
/// arrival or, once the thread has waited for an operation since it entered the scope, the
/// latest such operation's modelled end
/// (a chain of dependent operations, a GC step's read then program, counts each from the one
/// before it, not from when the thread woke up to see it done), never later than `now`.
pub(crate) fn submission_time(now: u64) -> u64 {
    match ARRIVAL.with(Cell::get) {
        0 => now,
        a => a.max(SCOPE_WAIT.with(Cell::get)).min(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_never_move_time_forward() {
        assert_eq!(submission_time(100), 100);
        {
            let _a = ArrivalScope::enter(40);
            assert_eq!(submission_time(100), 40);
            {
                let _b = ArrivalScope::enter(70);
                assert_eq!(submission_time(100), 70);
                assert_eq!(submission_time(50), 50);
            }
            assert_eq!(submission_time(100), 40);
        }
        assert_eq!(submission_time(100), 100);
    }

    /// Inside a scope, an operation submitted after a wait counts from the latest waited
    /// operation's modelled end (never later than now, never earlier than the arrival); a wait
    /// before the scope does not count; outside a scope, from now.
    #[test]
    fn a_wait_inside_a_scope_moves_the_next_submission_to_its_end() {
        note_wait_end(90);
        let a = ArrivalScope::enter(40);
        assert_eq!(submission_time(100), 40, "a wait before the scope");
        note_wait_end(30);
        assert_eq!(
            submission_time(100),
            40,
            "a wait that ended before the arrival"
        );
        note_wait_end(65);
        note_wait_end(55);
        assert_eq!(
            submission_time(100),
            65,
            "the latest end, not the last waited"
        );
        assert_eq!(submission_time(50), 50, "not later than now");
        {
            let _b = ArrivalScope::enter(45);
            assert_eq!(submission_time(100), 45, "an inner scope starts afresh");
            note_wait_end(80);
        }
        assert_eq!(
            submission_time(100),
            80,
            "the inner scope's waits count outside it"
        );
        drop(a);
        assert_eq!(submission_time(100), 100, "outside a scope: now");
        assert_eq!(
            last_wait_end_ns(),
            90,
            "the thread's latest wait end never moves back"
        );
    }
}
