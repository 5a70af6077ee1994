//! FIB audits: one at a time, on a thread of their own, their lines streamed.

use super::*;

/// A FIB audit: running, then its lines being streamed.
pub(crate) struct AuditJob {
    pub(super) result: Receiver<control::audit::AuditResult>,
    pub(super) lines: Option<std::vec::IntoIter<reply::AuditLine>>,
}

/// Audit lines per part of the stream.
const AUDIT_LINES_PER_PART: usize = 1024;

impl Daemon {
    /// Starts a FIB audit on its own thread over copies of the state, the
    /// installed routes and the live tables (one at a time).
    pub(super) fn start_audit(&mut self) -> Result<(), String> {
        if self.audit.is_some() {
            return Err("a FIB audit is already running".into());
        }
        let engine = self.xdp.as_mut().map(|x| x.audit(&self.shared.snapshot));
        let rx = control::audit::start(
            self.router.state.clone(),
            self.router.installed(),
            Arc::clone(&self.shared.snapshot.load()),
            engine,
            self.kernel.background_cpus(),
        );
        self.audit = Some(AuditJob {
            result: rx,
            lines: None,
        });
        Ok(())
    }

    /// The next part of the running audit's answer: its differences, one
    /// per line, then `{"summary": {...}}`; an error ends it with
    /// `{"error": ...}`.
    pub(super) fn audit_more(&mut self, sent: &mut u64, out: &mut Vec<u8>) -> StreamStep {
        let Some(job) = self.audit.as_mut() else {
            return StreamStep::Done;
        };
        if job.lines.is_none() {
            let values: Vec<reply::AuditLine> = match job.result.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return StreamStep::Pending,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => vec![reply::AuditLine::Error {
                    error: "the audit thread ended without a result".into(),
                }],
                Ok(Err(e)) => vec![reply::AuditLine::Error {
                    error: e.to_string(),
                }],
                Ok(Ok((diffs, checked))) => {
                    if !diffs.is_empty() {
                        warn!(differences = diffs.len(), "FIB audit found differences");
                    }
                    let differences = diffs.len();
                    diffs
                        .into_iter()
                        .map(reply::AuditLine::Difference)
                        .chain(std::iter::once(reply::AuditLine::Summary {
                            summary: reply::AuditSummary {
                                differences,
                                checked,
                            },
                        }))
                        .collect()
                }
            };
            job.lines = Some(values.into_iter());
        }
        let Some(lines) = job.lines.as_mut() else {
            return StreamStep::Done;
        };
        for v in lines.by_ref().take(AUDIT_LINES_PER_PART) {
            if serde_json::to_writer(&mut *out, &v).is_ok() {
                out.push(b'\n');
                *sent += 1;
            }
        }
        if lines.len() == 0 {
            self.audit = None;
            return StreamStep::Done;
        }
        StreamStep::More
    }
}
