//! Socket peers: the socket at the other end of a socket, by inode. Unix sockets through
//! `NETLINK_SOCK_DIAG` (`unix_diag_req` for one inode with `UDIAG_SHOW_PEER`, or one dump
//! of all while the start scan runs), TCP/UDP through `/proc/net/{tcp,tcp6,udp,udp6}` (the
//! socket whose local address is my remote one and whose remote is my local one): loopback
//! connections only, as a remote peer has no inode here.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a parsed `/proc/net/*` table is reused.
const NET_TABLE_TTL: Duration = Duration::from_millis(20);

/// Finds the socket at the other end of a socket.
pub(super) struct Peers {
    diag: Option<UnixDiag>,
    /// All unix sockets' peers, from one dump, while the start scan runs.
    preload: Option<HashMap<u64, Option<u64>>>,
    net: Option<(Instant, Vec<NetEntry>)>,
    warned: bool,
}

impl Peers {
    pub(super) fn new() -> Peers {
        let diag = match UnixDiag::open() {
            Ok(d) => Some(d),
            Err(err) => {
                tracing::warn!(error = %err, "no NETLINK_SOCK_DIAG: unix socket peers unknown");
                None
            }
        };
        Peers {
            diag,
            preload: None,
            net: None,
            warned: false,
        }
    }

    pub(super) fn preload_unix(&mut self) {
        if let Some(diag) = &self.diag {
            match diag.dump() {
                Ok(all) => self.preload = Some(all),
                Err(err) => tracing::debug!(error = %err, "sock_diag dump failed"),
            }
        }
    }

    pub(super) fn drop_preload(&mut self) {
        self.preload = None;
    }

    pub(super) fn peer(&mut self, ino: u64) -> Option<u64> {
        if let Some(known) = self.preload.as_ref().and_then(|p| p.get(&ino)) {
            return *known;
        }
        if let Some(diag) = &self.diag {
            match diag.query(ino) {
                Ok(Some(peer)) => return peer,
                Ok(None) => {}
                Err(err) => {
                    if !self.warned {
                        tracing::warn!(error = %err, "sock_diag query failed: unix socket peers unknown");
                        self.warned = true;
                    }
                    self.diag = None;
                }
            }
        }
        let fresh = self
            .net
            .as_ref()
            .is_some_and(|(t, _)| t.elapsed() < NET_TABLE_TTL);
        if !fresh {
            self.net = Some((Instant::now(), read_net_tables()));
        }
        self.net.as_ref().and_then(|(_, t)| inet_peer(t, ino))
    }
}

/// A `NETLINK_SOCK_DIAG` socket for unix-socket queries.
struct UnixDiag {
    fd: OwnedFd,
    seq: std::cell::Cell<u32>,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const UDIAG_SHOW_NAME: u32 = 0x01;
const UDIAG_SHOW_PEER: u32 = 0x04;
const UNIX_DIAG_PEER: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const UNIX_DIAG_MSG_LEN: usize = 16;

/// One answer of a sock_diag reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DiagAnswer {
    /// A unix socket: its inode and its peer's (`None`: not connected, or the peer has no
    /// inode yet, e.g. a connection not yet accepted).
    Unix { ino: u64, peer: Option<u64> },
    /// `NLMSG_ERROR` with this errno (0 is an acknowledgement).
    Error(i32),
    /// End of a dump.
    Done,
}

/// Parses a buffer of netlink messages answering a `unix_diag_req`.
pub(crate) fn parse_diag(buf: &[u8]) -> Vec<DiagAnswer> {
    let u16_at = |b: &[u8], at: usize| b.get(at..at + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(len) = u32_at(buf, pos) {
        let len = len as usize;
        if len < NLMSG_HDRLEN || pos + len > buf.len() {
            break;
        }
        let msg = &buf[pos..pos + len];
        match u16_at(msg, 4) {
            Some(NLMSG_DONE) => out.push(DiagAnswer::Done),
            Some(NLMSG_ERROR) => {
                let err = u32_at(msg, NLMSG_HDRLEN).map_or(0, |e| e as i32);
                out.push(DiagAnswer::Error(-err));
            }
            Some(SOCK_DIAG_BY_FAMILY) if len >= NLMSG_HDRLEN + UNIX_DIAG_MSG_LEN => {
                let body = &msg[NLMSG_HDRLEN..];
                let ino = u32_at(body, 4).unwrap_or(0) as u64;
                let mut peer = None;
                let mut at = UNIX_DIAG_MSG_LEN;
                while let (Some(alen), Some(atype)) = (u16_at(body, at), u16_at(body, at + 2)) {
                    let alen = alen as usize;
                    if alen < 4 || at + alen > body.len() {
                        break;
                    }
                    if atype == UNIX_DIAG_PEER {
                        peer = u32_at(body, at + 4).filter(|&p| p != 0).map(u64::from);
                    }
                    at += (alen + 3) & !3;
                }
                out.push(DiagAnswer::Unix { ino, peer });
            }
            _ => {}
        }
        pos += (len + 3) & !3;
    }
    out
}

impl UnixDiag {
    fn open() -> std::io::Result<UnixDiag> {
        // SAFETY: socket has no memory-safety preconditions.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval for the duration of the call.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(UnixDiag {
            fd,
            seq: std::cell::Cell::new(1),
        })
    }

    fn send(&self, ino: u32, dump: bool) -> std::io::Result<u32> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut req = Vec::with_capacity(40);
        let flags = libc::NLM_F_REQUEST as u16 | if dump { libc::NLM_F_DUMP as u16 } else { 0 };
        req.extend_from_slice(&40u32.to_ne_bytes());
        req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        req.extend_from_slice(&flags.to_ne_bytes());
        req.extend_from_slice(&seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        // struct unix_diag_req
        req.push(libc::AF_UNIX as u8);
        req.push(0);
        req.extend_from_slice(&0u16.to_ne_bytes());
        req.extend_from_slice(&u32::MAX.to_ne_bytes()); // all states
        req.extend_from_slice(&ino.to_ne_bytes());
        req.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_PEER).to_ne_bytes());
        req.extend_from_slice(&u32::MAX.to_ne_bytes()); // no cookie
        req.extend_from_slice(&u32::MAX.to_ne_bytes());
        // SAFETY: `req` is valid for its length; the kernel address is zero-initialized.
        let rc = unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(seq)
    }

    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// The peer of unix socket `ino`: `Ok(None)` when `ino` is not a unix socket,
    /// `Ok(Some(None))` when it has no peer.
    fn query(&self, ino: u64) -> std::io::Result<Option<Option<u64>>> {
        let Ok(ino32) = u32::try_from(ino) else {
            return Ok(None);
        };
        self.send(ino32, false)?;
        let mut buf = vec![0u8; 8192];
        let n = self.recv(&mut buf)?;
        for answer in parse_diag(&buf[..n]) {
            match answer {
                DiagAnswer::Unix { ino: i, peer } if i == ino => return Ok(Some(peer)),
                DiagAnswer::Error(e) if e == libc::ENOENT => return Ok(None),
                DiagAnswer::Error(0) => {}
                DiagAnswer::Error(e) => return Err(std::io::Error::from_raw_os_error(e)),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Every unix socket's peer.
    fn dump(&self) -> std::io::Result<HashMap<u64, Option<u64>>> {
        self.send(0, true)?;
        let mut all = HashMap::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = self.recv(&mut buf)?;
            if n == 0 {
                return Ok(all);
            }
            for answer in parse_diag(&buf[..n]) {
                match answer {
                    DiagAnswer::Unix { ino, peer } => {
                        all.insert(ino, peer);
                    }
                    DiagAnswer::Done => return Ok(all),
                    DiagAnswer::Error(0) => {}
                    DiagAnswer::Error(e) => return Err(std::io::Error::from_raw_os_error(e)),
                }
            }
        }
    }
}

/// One line of `/proc/net/{tcp,tcp6,udp,udp6}`, addresses as IPv6 (IPv4 mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NetEntry {
    /// `true` for TCP, `false` for UDP.
    pub(crate) tcp: bool,
    pub(crate) local: ([u8; 16], u16),
    pub(crate) remote: ([u8; 16], u16),
    pub(crate) inode: u64,
}

/// Parses `ADDR:PORT` as printed by `/proc/net/tcp` (`0100007F:1F90`) or `tcp6`: each
/// 32-bit word in host byte order, port in hex.
fn parse_net_addr(text: &str) -> Option<([u8; 16], u16)> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut out = [0u8; 16];
    match addr.len() {
        8 => {
            let word = u32::from_str_radix(addr, 16).ok()?;
            out[10] = 0xff;
            out[11] = 0xff;
            out[12..].copy_from_slice(&word.to_ne_bytes());
        }
        32 => {
            for i in 0..4 {
                let word = u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).ok()?;
                out[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
            }
        }
        _ => return None,
    }
    Some((out, port))
}

/// Parses the text of one `/proc/net/{tcp,tcp6,udp,udp6}` file.
pub(crate) fn parse_net_table(text: &str, tcp: bool) -> Vec<NetEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            Some(NetEntry {
                tcp,
                local: parse_net_addr(f.get(1)?)?,
                remote: parse_net_addr(f.get(2)?)?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

fn read_net_tables() -> Vec<NetEntry> {
    let mut all = Vec::new();
    for (file, tcp) in [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/net/{file}")) {
            all.extend(parse_net_table(&text, tcp));
        }
    }
    all
}

/// The inode of the socket at the other end of socket `ino` (a loopback connection).
pub(crate) fn inet_peer(table: &[NetEntry], ino: u64) -> Option<u64> {
    let me = table.iter().find(|e| e.inode == ino && ino != 0)?;
    if me.remote.1 == 0 {
        return None;
    }
    table
        .iter()
        .find(|e| {
            e.tcp == me.tcp
                && e.inode != 0
                && e.inode != ino
                && e.local == me.remote
                && e.remote == me.local
        })
        .map(|e| e.inode)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A reply as the kernel sends it (x86-64, little endian): one `unix_diag_msg` for inode
    /// 148 with a name attribute and a peer attribute (147), then `NLMSG_DONE`; then an
    /// `NLMSG_ERROR` with -ENOENT.
    #[test]
    fn sock_diag_answers() {
        #[rustfmt::skip]
        let buf: Vec<u8> = vec![
            // nlmsghdr: len 48, type 20, flags 2 (multi), seq 5, pid 0
            48, 0, 0, 0, 20, 0, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0,
            // unix_diag_msg: family 1, type 1 (stream), state 1, pad, ino 148, cookie
            1, 1, 1, 0, 148, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0,
            // rtattr UNIX_DIAG_NAME: len 5 ("a"), padded to 8
            5, 0, 0, 0, b'a', 0, 0, 0,
            // rtattr UNIX_DIAG_PEER: len 8, peer 147
            8, 0, 2, 0, 147, 0, 0, 0,
            // NLMSG_DONE
            20, 0, 0, 0, 3, 0, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            // NLMSG_ERROR: error -2, then the request header
            36, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 254, 255, 255, 255,
            40, 0, 0, 0, 20, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(
            parse_diag(&buf),
            vec![
                DiagAnswer::Unix {
                    ino: 148,
                    peer: Some(147)
                },
                DiagAnswer::Done,
                DiagAnswer::Error(libc::ENOENT),
            ]
        );
        // A listening socket (no peer attribute), and a cut message that is ignored.
        #[rustfmt::skip]
        let buf: Vec<u8> = vec![
            32, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
            1, 1, 10, 0, 200, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            44, 0, 0, 0, 20, 0,
        ];
        assert_eq!(
            parse_diag(&buf),
            vec![DiagAnswer::Unix {
                ino: 456,
                peer: None
            }]
        );
    }

    #[test]
    fn net_tables_give_loopback_peers() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1000 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 20 4 30 10 -1\n\
   3: 0A00020F:C351 08080808:0035 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1\n";
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000100007F:C352 01 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 20 4 30 10 -1\n\
   1: 00000000000000000000000001000000:1F92 00000000000000000000000001000000:C353 01 00000000:00000000 00:00000000 00000000     0        0 2004 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000000000000000000001000000:C353 00000000000000000000000001000000:1F92 01 00000000:00000000 00:00000000 00000000     0        0 2005 1 0000000000000000 20 4 30 10 -1\n";
        let v4 = "   0: 0100007F:C352 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0        0 2001 1\n";
        let mut table = parse_net_table(tcp, true);
        assert_eq!(table.len(), 4);
        assert_eq!(table[0].local.1, 8080);
        assert_eq!(&table[0].local.0[12..], &[127, 0, 0, 1]);
        table.extend(parse_net_table(tcp6, true));
        table.extend(parse_net_table(&format!("header\n{v4}"), true));
        assert_eq!(inet_peer(&table, 1001), Some(1002));
        assert_eq!(inet_peer(&table, 1002), Some(1001));
        assert_eq!(inet_peer(&table, 1000), None, "listening");
        assert_eq!(inet_peer(&table, 1003), None, "remote host");
        // An IPv4 client of a dual-stack server: the v4-mapped address matches.
        assert_eq!(inet_peer(&table, 2001), Some(2002));
        assert_eq!(inet_peer(&table, 2002), Some(2001));
        // ::1 on both ends.
        assert_eq!(inet_peer(&table, 2004), Some(2005));
        // UDP and TCP tables never pair with each other.
        let udp = parse_net_table(&format!("header\n{v4}"), false);
        assert_eq!(inet_peer(&[udp[0], table[5]], 2001), None);
    }
}
