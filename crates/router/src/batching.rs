//! When the control thread applies the kernel's changes to the tables.
//!
//! Each application publishes new tables: the FIB writer swaps its two
//! copies, and the workers move to the copy the control thread's core last
//! wrote, whose cache lines they must fetch again. A routing daemon
//! streaming changes would otherwise have them published as fast as the
//! loop turns (every few hundred microseconds), and in the FIB benchmark
//! lookups kept 0.53-0.71 of their idle rate under 100,000 changes a
//! second published every millisecond, 0.87-0.89 published every 10 ms
//! (BENCHMARKS.md). So a burst is applied when the netlink socket is
//! quiet, or after [`MAX_BURST`] while it lasts, and never sooner than
//! [`MIN_INTERVAL`] after the previous application: a change after a quiet
//! spell still goes out at once.

use std::time::{Duration, Instant};

/// The shortest time between two applications of kernel changes.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The longest a burst's first change waits while changes keep coming.
pub(crate) const MAX_BURST: Duration = Duration::from_millis(100);

/// The state of the changes waiting to be applied.
#[derive(Debug, Default)]
pub(crate) struct ChangeBatcher {
    /// When the oldest change not yet applied arrived.
    pending_since: Option<Instant>,
    /// When changes were last applied.
    last_applied: Option<Instant>,
}

impl ChangeBatcher {
    /// Kernel changes arrived at `now`.
    pub(crate) fn changed(&mut self, now: Instant) {
        self.pending_since.get_or_insert(now);
    }

    /// Whether the changes waiting should be applied at `now`; `quiet`:
    /// the netlink socket has nothing more to read.
    pub(crate) fn due(&self, now: Instant, quiet: bool) -> bool {
        let Some(since) = self.pending_since else {
            return false;
        };
        let spaced = self
            .last_applied
            .is_none_or(|t| now.saturating_duration_since(t) >= MIN_INTERVAL);
        spaced && (quiet || now.saturating_duration_since(since) >= MAX_BURST)
    }

    /// How long the loop may sleep before [`due`](Self::due) can turn true
    /// without a new event (None: nothing is waiting for time).
    pub(crate) fn wait(&self, now: Instant) -> Option<Duration> {
        self.pending_since?;
        let last = self.last_applied?;
        Some(MIN_INTERVAL.saturating_sub(now.saturating_duration_since(last)))
    }

    /// The waiting changes were applied at `now`.
    pub(crate) fn applied(&mut self, now: Instant) {
        self.pending_since = None;
        self.last_applied = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_change_after_a_quiet_spell_is_applied_at_once() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        assert!(!b.due(t0, true), "nothing waits");
        assert_eq!(b.wait(t0), None);
        b.changed(t0);
        assert!(b.due(t0, true));
        assert!(!b.due(t0, false), "more to read");
        b.applied(t0);
        // Long after: at once again.
        let t1 = t0 + ms(500);
        b.changed(t1);
        assert!(b.due(t1, true));
    }

    #[test]
    fn applications_are_spaced_by_the_interval() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        b.changed(t0);
        b.applied(t0);
        let t1 = t0 + ms(3);
        b.changed(t1);
        assert!(!b.due(t1, true), "3 ms after the last");
        assert_eq!(b.wait(t1), Some(ms(7)));
        assert!(!b.due(t0 + ms(9), true));
        assert!(b.due(t0 + MIN_INTERVAL, true));
        assert_eq!(b.wait(t0 + ms(12)), Some(Duration::ZERO));
    }

    #[test]
    fn a_burst_that_never_pauses_is_applied_every_max_burst() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        let mut applied = Vec::new();
        // A change every 50 us for one second, the socket never quiet.
        for i in 0..20_000u64 {
            let now = t0 + Duration::from_micros(50 * i);
            b.changed(now);
            if b.due(now, false) {
                b.applied(now);
                applied.push(now - t0);
            }
        }
        assert_eq!(applied.len(), 9, "{applied:?}");
        assert!(
            applied.iter().all(|d| d.as_millis() % 100 == 0),
            "{applied:?}"
        );
    }

    #[test]
    fn a_stream_with_pauses_is_applied_at_most_every_interval() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        let mut count = 0;
        // A change every 50 us with the socket quiet after each.
        for i in 0..20_000u64 {
            let now = t0 + Duration::from_micros(50 * i);
            b.changed(now);
            if b.due(now, true) {
                b.applied(now);
                count += 1;
            }
        }
        assert_eq!(count, 100);
    }
}
