//! When the control thread applies the kernel's changes to the tables.
//!
//! Each application publishes new tables: the FIB writer swaps its two
//! copies, and the workers move to the copy the control thread's core last
//! wrote, whose cache lines they must fetch again. A routing daemon
//! streaming changes would otherwise have them published as fast as the
//! loop turns (every few hundred microseconds), and in the FIB benchmark
//! IPv4 lookups kept 0.55-0.75 of their idle rate under 100,000 changes a
//! second published every millisecond, 0.78-0.96 every 10 ms and 0.98-1.00
//! every 50 ms (docs/notebook/2026-11-30-to-12-07-summary-rows.md). So a burst is applied when the netlink
//! socket is quiet, or after [`MAX_BURST`] while it lasts, and never sooner
//! than a spacing after the previous application: [`MIN_INTERVAL`] at
//! first, doubled each time the next change was already waiting when the
//! spacing ended (a stream, not a lone change), up to [`MAX_INTERVAL`], and
//! back to the minimum once a change finds the spacing over (as an IGP
//! throttles its SPF runs under churn). A change after a quiet spell goes
//! out at once; under a long stream each change waits at most about 50 ms
//! if the socket goes quiet between changes, else at most [`MAX_BURST`].

use std::time::{Duration, Instant};

/// The shortest time between two applications of kernel changes.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The longest, reached while changes keep coming.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_millis(50);

/// The longest a burst's first change waits while changes keep coming.
pub(crate) const MAX_BURST: Duration = Duration::from_millis(100);

/// The state of the changes waiting to be applied.
#[derive(Debug, Default)]
pub(crate) struct ChangeBatcher {
    /// When the oldest change not yet applied arrived.
    pending_since: Option<Instant>,
    /// When changes were last applied.
    last_applied: Option<Instant>,
    /// The spacing after the last application (zero: the minimum).
    interval: Duration,
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
            .is_none_or(|t| now.saturating_duration_since(t) >= self.spacing());
        spaced && (quiet || now.saturating_duration_since(since) >= MAX_BURST)
    }

    /// How long the loop may sleep before [`due`](Self::due) can turn true
    /// without a new event (None: nothing is waiting for time).
    pub(crate) fn wait(&self, now: Instant) -> Option<Duration> {
        self.pending_since?;
        let last = self.last_applied?;
        Some(
            self.spacing()
                .saturating_sub(now.saturating_duration_since(last)),
        )
    }

    /// The spacing that must pass after the last application.
    pub(crate) fn spacing(&self) -> Duration {
        self.interval.max(MIN_INTERVAL)
    }

    /// The waiting changes were applied at `now`.
    pub(crate) fn applied(&mut self, now: Instant) {
        // Part of a stream: the first of these changes came before the
        // spacing was over.
        let stream = match (self.pending_since, self.last_applied) {
            (Some(since), Some(last)) => since < last + self.spacing(),
            _ => false,
        };
        self.interval = if stream {
            (self.spacing() * 2).min(MAX_INTERVAL)
        } else {
            MIN_INTERVAL
        };
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

    /// Feeds `b` a change every 50 us for one second, the socket `quiet`
    /// after each or not, applying when due; returns when it applied, in
    /// ms from `t0`.
    fn one_second_stream(b: &mut ChangeBatcher, t0: Instant, quiet: bool) -> Vec<u128> {
        let mut at = Vec::new();
        for i in 0..20_000u64 {
            let now = t0 + Duration::from_micros(50 * i);
            b.changed(now);
            if b.due(now, quiet) {
                b.applied(now);
                at.push((now - t0).as_millis());
            }
        }
        at
    }

    #[test]
    fn a_burst_that_never_pauses_is_applied_every_max_burst() {
        let t0 = Instant::now();
        let applied = one_second_stream(&mut ChangeBatcher::default(), t0, false);
        assert_eq!(applied.len(), 9, "{applied:?}");
        assert!(applied.iter().all(|ms| ms % 100 == 0), "{applied:?}");
    }

    #[test]
    fn a_stream_backs_off_to_the_longest_spacing_and_a_pause_resets_it() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        let at = one_second_stream(&mut b, t0, true);
        let gaps: Vec<u128> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps[..4], [10, 20, 40, 50], "{at:?}");
        assert!(gaps[3..].iter().all(|&g| g == 50), "{gaps:?}");
        assert_eq!(at.len(), 4 + (1000 - 70) / 50);
        // The stream's last changes, 50 ms after the last application.
        let t1 = t0 + ms(1020);
        assert!(b.due(t1, true));
        b.applied(t1);
        assert_eq!(b.spacing(), MAX_INTERVAL);
        // A pause longer than the spacing: the next change goes out at
        // once and the spacing is back to the minimum.
        let t2 = t1 + ms(200);
        b.changed(t2);
        assert!(b.due(t2, true));
        b.applied(t2);
        assert_eq!(b.spacing(), MIN_INTERVAL);
        b.changed(t2 + ms(2));
        assert_eq!(b.wait(t2 + ms(2)), Some(ms(8)));
    }

    #[test]
    fn lone_changes_keep_the_shortest_spacing() {
        let t0 = Instant::now();
        let mut b = ChangeBatcher::default();
        // A change every 15 ms: each finds the spacing over.
        for i in 0..10u64 {
            let now = t0 + ms(15 * i);
            b.changed(now);
            assert!(b.due(now, true), "change {i}");
            b.applied(now);
            assert_eq!(b.spacing(), MIN_INTERVAL);
        }
    }
}
