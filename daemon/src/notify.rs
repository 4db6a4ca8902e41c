//! sd_notify(3) over the NOTIFY_SOCKET datagram socket: READY, STATUS, RELOADING, STOPPING
//! and the watchdog keep-alive. It is a few lines of std, so no crate is needed.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Where systemd listens, if it does (NOTIFY_SOCKET unset: not under systemd, all no-ops).
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
}

impl Notifier {
    pub fn from_env() -> Self {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.to_string_lossy().into_owned();
            let addr = if let Some(name) = path.strip_prefix('@') {
                // A leading '@' names a socket in the abstract namespace.
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?
            } else {
                std::os::unix::net::SocketAddr::from_pathname(&path).ok()?
            };
            let sock = UnixDatagram::unbound().ok()?;
            Some((sock, addr))
        });
        Notifier { socket }
    }

    /// Send one notification; failures are logged, never fatal (systemd may be gone).
    pub fn notify(&self, state: &str) {
        if let Some((sock, addr)) = &self.socket {
            if let Err(e) = sock.send_to_addr(state.as_bytes(), addr) {
                tracing::debug!("sd_notify {state:?} failed: {e}");
            }
        }
    }

    /// The watchdog period systemd asked for, when it asked this process.
    pub fn watchdog_interval() -> Option<Duration> {
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        if let Ok(pid) = std::env::var("WATCHDOG_PID") {
            if pid.parse::<u32>().ok()? != std::process::id() {
                return None;
            }
        }
        (usec > 0).then(|| Duration::from_micros(usec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_datagrams_to_the_socket_systemd_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let addr = std::os::unix::net::SocketAddr::from_pathname(&path).unwrap();
        let n = Notifier {
            socket: Some((UnixDatagram::unbound().unwrap(), addr)),
        };
        n.notify("READY=1\nSTATUS=serving");
        let mut buf = [0u8; 64];
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=serving");
    }
}
