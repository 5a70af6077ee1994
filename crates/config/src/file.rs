//! Reading the files a configuration names: bounded, never blocking, and
//! for a control-socket client, confined to one directory.
//!
//! A client may name any path (`config check --path`), and a config may
//! name any rules file. Only a regular file of at most [`MAX_FILE_BYTES`]
//! is read: a FIFO, device or directory is refused before any read (opened
//! non-blocking, so a FIFO without a writer cannot wedge the reader), and
//! so is a larger file. For a client, [`confined`] also refuses a path
//! (symbolic links resolved) outside the running configuration's
//! directory, so a client cannot make the daemon read, and echo parts of,
//! files it could not read itself.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest configuration or rules file read: 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads the regular file at `path` as text, at most [`MAX_FILE_BYTES`].
pub fn read_text_file(path: &Path) -> io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let too_large = |n: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{n} bytes or more: a file here has at most {MAX_FILE_BYTES}"),
        )
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut text = String::new();
    // The file may grow after the check.
    f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(text.len() as u64));
    }
    Ok(text)
}

/// `path` with symbolic links resolved, if it lies under `root` (also
/// resolved); else a PermissionDenied error naming `root`.
pub fn confined(path: &Path, root: &Path) -> io::Result<PathBuf> {
    let root = std::fs::canonicalize(root)?;
    let real = std::fs::canonicalize(path)?;
    if real.starts_with(&root) {
        Ok(real)
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "outside {}: a control client may only name files in the running configuration's directory",
                root.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("fastfwd-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small.toml");
        std::fs::write(&small, "x = 1\n").unwrap();
        assert_eq!(read_text_file(&small).unwrap(), "x = 1\n");
        for p in ["/dev/zero", "/dev/null"] {
            let e = read_text_file(Path::new(p)).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{p}: {e}");
        }
        assert!(read_text_file(&dir).is_err(), "a directory");
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let t = std::time::Instant::now();
            let e = read_text_file(&fifo).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
            assert!(t.elapsed() < std::time::Duration::from_secs(1));
        }
        let big = dir.join("big.toml");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        let e = read_text_file(&big).unwrap_err();
        assert!(e.to_string().contains("at most 16777216"), "{e}");
        // Confinement: inside the directory yes, outside (or through a
        // link leading out) no.
        assert!(confined(&small, &dir).is_ok());
        let e = confined(Path::new("/etc/hostname"), &dir).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(confined(&link, &dir).is_err());
        assert!(confined(&dir.join("../../etc/hostname"), &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
