//! The control socket: newline-delimited JSON, one request per line, the peer's credentials
//! (SO_PEERCRED) deciding what it may do. Every client is bounded: a line length limit, a
//! read timeout, a write timeout and a cap on concurrent clients, so that no client can stall
//! the daemon or the others.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rocs_config::protocol::{encode_reply, parse_request, ErrorCode, ErrorReply, MAX_REQUEST_LINE};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};

use crate::state::Daemon;

/// Clients served at once; more are told to come back.
const MAX_CLIENTS: usize = 256;
/// A reply must be taken by the client within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a peer may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub uid: u32,
    pub read: bool,
    pub change: bool,
}

/// Root (or the user rocsd runs as) may do everything; members of the rocs group may read;
/// nobody else may do anything. `groups` are the peer process's group ids (primary and
/// supplementary).
pub fn access_for(uid: u32, groups: &[u32], rocs_gid: Option<u32>, own_uid: u32) -> Access {
    let admin = uid == 0 || uid == own_uid;
    let member = rocs_gid.is_some_and(|g| groups.contains(&g));
    Access {
        uid,
        read: admin || member,
        change: admin,
    }
}

/// The group ids of process `pid` (from /proc/PID/status: `Gid:` real and effective, and
/// `Groups:`). The process may be gone by now; then it has none.
fn groups_of(pid: Option<i32>, primary: u32) -> Vec<u32> {
    let mut groups = vec![primary];
    let Some(pid) = pid else { return groups };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return groups;
    };
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Groups:") {
            groups.extend(
                rest.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    groups
}

/// Bind the control socket: refuse to take over a socket another rocsd still serves,
/// replace a stale one, create the folder, and set the mode and group.
pub fn bind(path: &Path, mode: u32, gid: Option<u32>) -> anyhow::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!(
                "{} exists and is not a socket; remove it or choose another `socket`",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "{} is served by another running rocsd; stop it first or choose another socket",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the socket folder {}", dir.display()))?;
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    if let Some(gid) = gid {
        if let Err(e) = nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid))) {
            tracing::warn!("cannot give {} to group {gid}: {e}", path.display());
        }
    }
    Ok(listener)
}

/// Removes the socket file when the server is dropped (clean stop, or an error path).
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Serve clients until `shutdown` turns true.
pub async fn serve(
    listener: UnixListener,
    daemon: Arc<Daemon>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    let own_uid = nix::unistd::geteuid().as_raw();
    let timeout = Duration::from_millis(daemon.config.client_timeout_ms);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: wait a little rather than spin.
                    tracing::warn!("control socket accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let mut stream = stream;
                let e = ErrorReply::new(ErrorCode::Unavailable, "too many clients; try again");
                let _ = tokio::time::timeout(
                    WRITE_TIMEOUT,
                    stream.write_all(encode_reply(None, Err(&e)).as_bytes()),
                )
                .await;
            });
            continue;
        };
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let access = match stream.peer_cred() {
                Ok(c) => {
                    let groups = groups_of(c.pid(), c.gid());
                    access_for(c.uid(), &groups, daemon.rocs_gid, own_uid)
                }
                Err(e) => {
                    tracing::warn!("cannot read a control client's credentials: {e}");
                    Access {
                        uid: u32::MAX,
                        read: false,
                        change: false,
                    }
                }
            };
            if let Err(e) = client(stream, &daemon, access, timeout).await {
                tracing::debug!("control client (uid {}) ended: {e}", access.uid);
            }
        });
    }
}

/// The outcome of reading one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Complete(Vec<u8>),
    Eof,
    TooLong,
}

/// Read one line of at most `max` bytes (without the newline), never buffering more.
pub async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() {
                Line::Eof
            } else {
                Line::Complete(line)
            });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Ok(Line::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Complete(line));
        }
    }
}

async fn client(
    stream: UnixStream,
    daemon: &Daemon,
    access: Access,
    timeout: Duration,
) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(8192, read);
    loop {
        let line = match tokio::time::timeout(timeout, read_line(&mut read, MAX_REQUEST_LINE)).await
        {
            Err(_) => {
                let e = ErrorReply::new(
                    ErrorCode::Timeout,
                    format!("no complete request line within {timeout:?}; closing"),
                );
                send(&mut write, &encode_reply(None, Err(&e))).await?;
                return Ok(());
            }
            Ok(r) => r?,
        };
        let line = match line {
            Line::Eof => return Ok(()),
            Line::TooLong => {
                let e = ErrorReply::new(
                    ErrorCode::TooLong,
                    format!("request line longer than {MAX_REQUEST_LINE} bytes; closing"),
                );
                // The rest of the line cannot be told from the next request: close.
                send(&mut write, &encode_reply(None, Err(&e))).await?;
                return Ok(());
            }
            Line::Complete(l) => l,
        };
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if !access.read {
            let e = ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!(
                    "permission denied: uid {} is neither root nor in group {:?}",
                    access.uid, daemon.config.socket_group
                ),
            );
            tracing::warn!(
                "refused a control client: uid {} is not allowed to read",
                access.uid
            );
            send(&mut write, &encode_reply(None, Err(&e))).await?;
            return Ok(());
        }
        let reply = match parse_request(&line) {
            Err((id, e)) => encode_reply(id.as_ref(), Err(&e)),
            Ok(env) => {
                if env.request.changes_state() && !access.change {
                    let e = ErrorReply::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "permission denied: {} changes what rocsd does; only root may",
                            env.request.name()
                        ),
                    );
                    encode_reply(env.id.as_ref(), Err(&e))
                } else {
                    match daemon.handle(env.request).await {
                        Ok(v) => encode_reply(env.id.as_ref(), Ok(v)),
                        Err(e) => encode_reply(env.id.as_ref(), Err(&e)),
                    }
                }
            }
        };
        send(&mut write, &reply).await?;
    }
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, line: &str) -> io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, w.write_all(line.as_bytes())).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "client does not read",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_changes_group_reads_others_nothing() {
        let rocs = Some(990);
        assert_eq!(
            access_for(0, &[0], rocs, 0),
            Access {
                uid: 0,
                read: true,
                change: true
            }
        );
        let member = access_for(1000, &[1000, 990], rocs, 0);
        assert!(member.read && !member.change);
        let other = access_for(65534, &[65534], rocs, 0);
        assert!(!other.read && !other.change);
        // Without a rocs group nobody but root reads.
        assert!(!access_for(1000, &[1000, 990], None, 0).read);
        // rocsd run by a user (the demo) serves that user fully.
        assert!(access_for(1000, &[1000], None, 1000).change);
    }

    #[tokio::test]
    async fn lines_are_bounded() {
        let data: &[u8] = b"abc\n\nxyz";
        let mut r = BufReader::new(data);
        assert_eq!(
            read_line(&mut r, 10).await.unwrap(),
            Line::Complete(b"abc".to_vec())
        );
        assert_eq!(read_line(&mut r, 10).await.unwrap(), Line::Complete(vec![]));
        assert_eq!(
            read_line(&mut r, 10).await.unwrap(),
            Line::Complete(b"xyz".to_vec())
        );
        assert_eq!(read_line(&mut r, 10).await.unwrap(), Line::Eof);
        let long = [b'x'; 100];
        let mut r = BufReader::with_capacity(7, &long[..]);
        assert_eq!(read_line(&mut r, 50).await.unwrap(), Line::TooLong);
    }
}
