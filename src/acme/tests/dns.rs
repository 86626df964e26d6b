//! A DNS server for pebble's lookups (its `-dnsserver`): every name is 127.0.0.1, so
//! a test may order certificates for names of its own (`a.holdfast.test`) and pebble
//! validates them against the test's responders on loopback. A records get
//! 127.0.0.1; every other type an empty answer (the name exists, with no such record).

use std::net::SocketAddr;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// The running server; it stops when dropped.
pub struct Dns {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Dns {
    pub async fn start() -> Dns {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind the DNS socket");
        let addr = socket.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut query = [0u8; 1500];
            while let Ok((n, peer)) = socket.recv_from(&mut query).await {
                if let Some(reply) = answer(query.get(..n).unwrap_or_default()) {
                    let _ = socket.send_to(&reply, peer).await;
                }
            }
        });
        Dns { addr, task }
    }
}

/// The reply to one query (RFC 1035 section 4.1), or `None` for what is not a query
/// with one question.
fn answer(query: &[u8]) -> Option<Vec<u8>> {
    let header = query.get(..12)?;
    let is_query = header.get(2)? & 0x80 == 0;
    let questions = u16::from_be_bytes([*header.get(4)?, *header.get(5)?]);
    if !is_query || questions != 1 {
        return None;
    }
    // The question: labels up to the root label, then type and class.
    let mut at = 12;
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    let question = query.get(12..at + 4)?;
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let is_a = qtype == 1;
    let mut reply = Vec::with_capacity(question.len() + 28);
    reply.extend_from_slice(header.get(..2)?); // ID
                                               // QR, the query's opcode and RD; AA and RA; no error.
    reply.push(0x84 | (header.get(2)? & 0x79));
    reply.push(0x80);
    reply.extend_from_slice(&[0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
    reply.extend_from_slice(question);
    if is_a {
        // A pointer to the question's name, A, IN, TTL 0, 4 bytes: 127.0.0.1.
        reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1]);
    }
    Some(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `a.test` of type `qtype`, with an EDNS record as Go's resolver
    /// sends.
    fn query(qtype: u8) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        q.extend_from_slice(&[1, b'a', 4, b't', b'e', b's', b't', 0, 0, qtype, 0, 1]);
        q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        q
    }

    #[test]
    fn a_queries_get_loopback_and_others_nothing() {
        let reply = answer(&query(1)).unwrap();
        assert_eq!(&reply[..2], &[0x12, 0x34]);
        assert_eq!(&reply[6..8], &[0, 1], "one answer");
        assert_eq!(&reply[reply.len() - 4..], &[127, 0, 0, 1]);
        let reply = answer(&query(28)).unwrap();
        assert_eq!(&reply[6..8], &[0, 0], "no answer");
        assert_eq!(reply.len(), 12 + 12);
        assert!(answer(&[0u8; 5]).is_none());
    }
}
