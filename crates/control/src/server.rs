//! The control socket: a Unix stream socket, mode 0600 (root only), no
//! network listener. Each connection sends request lines and reads one
//! response line per request.

use crate::protocol::{Request, Response};
use crate::ControlError;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The listening control socket; removes its path on drop.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket left by a crashed daemon,
    /// refusing if another daemon answers there) with mode 0600.
    pub fn bind(path: &Path) -> Result<ControlServer, ControlError> {
        let err = |e: std::io::Error| ControlError::Socket(format!("{}: {e}", path.display()));
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::Socket(format!(
                    "{}: another fastfwd is already running (its control socket answers)",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        let listener = UnixListener::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        listener.set_nonblocking(true).map_err(err)?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The descriptor that becomes readable when a client connects.
    pub fn fd(&self) -> i32 {
        self.listener.as_raw_fd()
    }

    /// Serves every pending connection: reads its requests (a client has
    /// 1 s per line), answers each with `handle`.
    pub fn serve_pending(&self, mut handle: impl FnMut(Request) -> Response) {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = serve_one(stream, &mut handle);
        }
    }
}

fn serve_one(
    stream: UnixStream,
    handle: &mut impl FnMut(Request) -> Response,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut writer = stream.try_clone()?;
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(req),
            Err(e) => Response::err(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_vec(&resp)
            .unwrap_or_else(|_| br#"{"ok":false,"error":"encoding"}"#.to_vec());
        out.push(b'\n');
        writer.write_all(&out)?;
    }
    Ok(())
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one request to the daemon at `path` and returns its response.
pub fn request(path: &Path, req: &Request) -> Result<Response, ControlError> {
    let err = |e: std::io::Error| {
        ControlError::Socket(format!(
            "{}: {e} (is `fastfwd run` running, and are you root?)",
            path.display()
        ))
    };
    let mut stream = UnixStream::connect(path).map_err(err)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(err)?;
    let mut line = serde_json::to_vec(req).map_err(|e| ControlError::Socket(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(err)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(err)?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(err)?;
    serde_json::from_str(&answer)
        .map_err(|e| ControlError::Socket(format!("bad response from the daemon: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_requests_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("fastfwd-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let server = ControlServer::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            ControlServer::bind(&path).is_err(),
            "a second daemon is refused"
        );
        let p2 = path.clone();
        let client = std::thread::spawn(move || request(&p2, &Request::ShowDrops).unwrap());
        let mut served = 0;
        for _ in 0..200 {
            server.serve_pending(|r| {
                served += 1;
                assert_eq!(r, Request::ShowDrops);
                Response::ok("drops")
            });
            if served > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let resp = client.join().unwrap();
        assert_eq!(resp, Response::ok("drops"));
        drop(server);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
