//! The control socket: newline-delimited JSON, one request per line, the peer's credentials
//! (SO_PEERCRED and SO_PEERGROUPS) deciding what it may do. Every client is bounded: a line
//! length limit, a read timeout, a write timeout and a cap on concurrent clients, so that no
//! client can stall the daemon or the others.
//!
//! Fairness: a peer's credentials are read when it is accepted, before it takes a slot.
//! Readers (members of the rocs group) share fewer slots than there are, at most
//! [`MAX_PER_READER`] each, so that idle connections of one user cannot starve the others and
//! root always finds a slot. A refused client is told why in a reply it can read: its request
//! line is read first, so it is never closed on while still writing (EPIPE).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rocs_config::protocol::{encode_reply, parse_request, ErrorCode, ErrorReply, MAX_REQUEST_LINE};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};

use crate::state::Daemon;

/// Clients served at once; more are told to come back.
const MAX_CLIENTS: usize = 256;
/// Slots only root (or rocsd's own user) may take, so that it is served however many readers
/// are connected.
const ADMIN_RESERVE: usize = 64;
/// Slots one reader (a uid that is not root) may hold at once.
const MAX_PER_READER: usize = 32;
/// Refused clients being answered at once; beyond this a refusal is written without waiting
/// for the request (a flood: the client may then fail to write before it reads).
const MAX_REFUSING: usize = 512;
/// The longest request line a refused client may send; only its id is wanted (rocsctl's
/// requests are far shorter).
const MAX_REFUSED_LINE: usize = 4096;
/// How long a refused client has to send its request line before it is answered anyway.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// At most one refusal is logged per this interval; the others are counted in the next one.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
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

/// The supplementary groups of the process that connected on `socket`, as the kernel
/// recorded them at connect time (SO_PEERGROUPS, Linux 4.13). Unlike /proc/PID/status this
/// cannot name another process that reused the peer's pid.
fn peer_groups(socket: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    const GID_SIZE: usize = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    // The groups were fixed at connect: a second call with the size the kernel asked for
    // succeeds; a third is a guard against a kernel that keeps asking for more.
    for _ in 0..3 {
        let mut len = (groups.len() * GID_SIZE) as libc::socklen_t;
        // SAFETY: `socket` is an open descriptor borrowed for the whole call; `groups` is a
        // live, writable buffer of exactly `len` bytes, and the kernel writes at most `len`
        // bytes into it and stores the length used (or, with ERANGE, needed) in `len`.
        let r = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / GID_SIZE);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
        groups.resize((len as usize / GID_SIZE).max(groups.len() + 1), 0);
    }
    Err(io::Error::other(
        "SO_PEERGROUPS kept asking for a larger buffer",
    ))
}

/// What the peer of `stream` may do, from the credentials the kernel recorded at connect.
fn peer_access(stream: &UnixStream, rocs_gid: Option<u32>, own_uid: u32) -> Access {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("cannot read a control client's credentials: {e}");
            return Access {
                uid: u32::MAX,
                read: false,
                change: false,
            };
        }
    };
    let mut groups = vec![cred.gid()];
    match peer_groups(stream.as_fd()) {
        Ok(g) => groups.extend(g),
        // Only the primary group then counts. Said once: it is the kernel's doing (before
        // 4.13 there is no SO_PEERGROUPS), not the client's.
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "cannot read the groups of control clients (SO_PEERGROUPS: {e}); only \
                     their primary group lets them read"
                );
            }
        }
    }
    access_for(cred.uid(), &groups, rocs_gid, own_uid)
}

/// The clients being served, counted as the admission rules need them.
#[derive(Debug, Default)]
struct Occupancy {
    total: usize,
    readers: usize,
    per_reader: HashMap<u32, usize>,
}

impl Occupancy {
    /// Take a slot for `access`, or say why not. Peers that may not read are refused here,
    /// before they hold anything.
    fn admit(&mut self, access: Access, group: &str) -> Result<(), ErrorReply> {
        let busy = |message: String| Err(ErrorReply::new(ErrorCode::Unavailable, message));
        if !access.read {
            return Err(ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!(
                    "permission denied: uid {} is neither root nor in group {group:?}",
                    access.uid
                ),
            ));
        }
        if access.change {
            if self.total >= MAX_CLIENTS {
                return busy(format!(
                    "rocsd is serving {MAX_CLIENTS} control clients, its most at once; try again"
                ));
            }
        } else {
            let mine = self.per_reader.get(&access.uid).copied().unwrap_or(0);
            if mine >= MAX_PER_READER {
                return busy(format!(
                    "uid {} already has {mine} connections to rocsd, the most one user may \
                     hold; close idle ones and try again",
                    access.uid
                ));
            }
            if self.readers >= MAX_CLIENTS - ADMIN_RESERVE || self.total >= MAX_CLIENTS {
                return busy(format!(
                    "rocsd is serving {} readers, its most at once; try again",
                    self.readers
                ));
            }
            self.readers += 1;
            *self.per_reader.entry(access.uid).or_default() += 1;
        }
        self.total += 1;
        Ok(())
    }

    fn release(&mut self, access: Access) {
        self.total -= 1;
        if !access.change {
            self.readers -= 1;
            if let Some(n) = self.per_reader.get_mut(&access.uid) {
                *n -= 1;
                if *n == 0 {
                    self.per_reader.remove(&access.uid);
                }
            }
        }
    }
}

/// A slot taken by an admitted client, given back when the client is done.
struct Slot {
    occupancy: Arc<Mutex<Occupancy>>,
    access: Access,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.occupancy.lock().unwrap().release(self.access);
    }
}

/// Lets one message through per interval and counts the ones it held back.
#[derive(Debug)]
struct RateLimit {
    interval: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl RateLimit {
    fn new(interval: Duration) -> Self {
        RateLimit {
            interval,
            last: None,
            held_back: 0,
        }
    }

    /// `Some(n)` when a message may be logged at `now` (`n` were held back since the last
    /// one); `None` when it is held back.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.interval => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
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
    let occupancy = Arc::new(Mutex::new(Occupancy::default()));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut refusal_log = RateLimit::new(REFUSAL_LOG_INTERVAL);
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
        let access = peer_access(&stream, daemon.rocs_gid, own_uid);
        let admitted = occupancy
            .lock()
            .unwrap()
            .admit(access, &daemon.config.socket_group);
        match admitted {
            Ok(()) => {
                let slot = Slot {
                    occupancy: occupancy.clone(),
                    access,
                };
                let daemon = daemon.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = client(stream, &daemon, access, timeout).await {
                        tracing::debug!("control client (uid {}) ended: {e}", access.uid);
                    }
                });
            }
            Err(refusal) => {
                if let Some(held_back) = refusal_log.allow(Instant::now()) {
                    let more = if held_back > 0 {
                        format!(" ({held_back} more refused since the last such message)")
                    } else {
                        String::new()
                    };
                    tracing::warn!(
                        "refused a control client: uid {}: {}{more}",
                        access.uid,
                        refusal.message
                    );
                }
                match refusing.clone().try_acquire_owned() {
                    Ok(permit) => {
                        tokio::spawn(async move {
                            let _permit = permit;
                            refuse(stream, &refusal).await;
                        });
                    }
                    // A flood: answer without reading, never wait.
                    Err(_) => {
                        let _ = stream.try_write(encode_reply(None, Err(&refusal)).as_bytes());
                    }
                }
            }
        }
    }
}

/// Tell a refused client why, in a reply it can read: take its request line first (so that
/// it has finished writing before the connection closes) and echo its id.
async fn refuse(stream: UnixStream, refusal: &ErrorReply) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(1024, read);
    let line = read_line(&mut read, MAX_REFUSED_LINE);
    let id = match tokio::time::timeout(REFUSAL_READ_TIMEOUT, line).await {
        Ok(Ok(Line::Complete(line))) => request_id(&line),
        _ => None,
    };
    let _ = send(&mut write, &encode_reply(id.as_ref(), Err(refusal))).await;
}

/// The id of a request line, whether or not the rest of it is valid.
fn request_id(line: &[u8]) -> Option<Value> {
    match parse_request(line) {
        Ok(envelope) => envelope.id,
        Err((id, _)) => id,
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

    const ROOT: Access = Access {
        uid: 0,
        read: true,
        change: true,
    };

    fn reader(uid: u32) -> Access {
        Access {
            uid,
            read: true,
            change: false,
        }
    }

    #[test]
    fn one_reader_cannot_take_every_slot_and_root_always_finds_one() {
        let mut o = Occupancy::default();
        for _ in 0..MAX_PER_READER {
            o.admit(reader(1000), "rocs").unwrap();
        }
        let e = o.admit(reader(1000), "rocs").unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(
            e.message.contains("uid 1000 already has 32"),
            "{}",
            e.message
        );
        // Other readers fill what readers may share, and no more.
        let mut uid = 2000;
        while o.admit(reader(uid), "rocs").is_ok() {
            uid += 1;
        }
        assert_eq!(o.readers, MAX_CLIENTS - ADMIN_RESERVE);
        // Root takes the reserve, then is told to come back too.
        for _ in 0..ADMIN_RESERVE {
            o.admit(ROOT, "rocs").unwrap();
        }
        assert_eq!(o.total, MAX_CLIENTS);
        assert_eq!(
            o.admit(ROOT, "rocs").unwrap_err().code,
            ErrorCode::Unavailable
        );
        // A reader that leaves frees its slot for a reader.
        o.release(reader(1000));
        o.admit(reader(1000), "rocs").unwrap();
        o.release(ROOT);
        o.admit(ROOT, "rocs").unwrap();
    }

    #[test]
    fn peers_that_may_not_read_take_no_slot() {
        let mut o = Occupancy::default();
        let nobody = access_for(65534, &[65534], Some(990), 0);
        let e = o.admit(nobody, "rocs").unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(e.message.contains("uid 65534") && e.message.contains("\"rocs\""));
        assert_eq!(o.total, 0);
    }

    #[test]
    fn slots_are_given_back_per_user() {
        let mut o = Occupancy::default();
        o.admit(reader(7), "rocs").unwrap();
        o.admit(ROOT, "rocs").unwrap();
        o.release(reader(7));
        o.release(ROOT);
        assert_eq!((o.total, o.readers), (0, 0));
        assert!(o.per_reader.is_empty());
    }

    #[test]
    fn refusals_are_logged_once_per_interval_with_a_count_of_the_rest() {
        let mut log = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.allow(t0), Some(0));
        for ms in [1, 500, 9_999] {
            assert_eq!(log.allow(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(log.allow(t0 + Duration::from_secs(10)), Some(3));
        assert_eq!(log.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(log.allow(t0 + Duration::from_secs(30)), Some(1));
    }

    #[test]
    fn peer_groups_are_the_connecting_process_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut got = peer_groups(a.as_fd()).unwrap();
        let mut want: Vec<u32> = nix::unistd::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn a_request_id_is_found_in_good_and_bad_requests() {
        assert_eq!(
            request_id(br#"{"v":1,"id":7,"request":"status"}"#),
            Some(Value::from(7))
        );
        assert_eq!(
            request_id(br#"{"v":1,"id":"x","request":"nonsense"}"#),
            Some(Value::from("x"))
        );
        assert_eq!(request_id(b"not json"), None);
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
