use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::net::{self, Deadline, InBuf, Stream, TlsStream};
use crate::tls::testing::TestCa;

/// A connected pair of TLS streams over loopback: (client side, server side).
async fn pair() -> (Stream, Stream) {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["localhost"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server_config());
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        small_buffers(&tcp);
        let (tcp, conn) = acceptor.accept(tcp).await.unwrap().into_inner();
        Stream::Tls(Box::new(TlsStream::new(tcp, conn.into())))
    });
    let connector = tokio_rustls::TlsConnector::from(ca.client_config());
    let tcp = TcpStream::connect(addr).await.unwrap();
    small_buffers(&tcp);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let (tcp, conn) = connector.connect(name, tcp).await.unwrap().into_inner();
    let client = Stream::Tls(Box::new(TlsStream::new(tcp, conn.into())));
    (client, server.await.unwrap())
}

/// Socket buffers of a few kB, so a large write fills them midway through its records.
fn small_buffers(tcp: &TcpStream) {
    let sock = socket2::SockRef::from(tcp);
    sock.set_send_buffer_size(32 * 1024).unwrap();
    sock.set_recv_buffer_size(32 * 1024).unwrap();
}

/// Reads until `want` bytes came or the stream ended.
async fn read_all(stream: &mut Stream, want: usize) -> Vec<u8> {
    let mut got = Vec::with_capacity(want);
    let mut buf = InBuf::new(net::ORIGIN_BUF);
    while got.len() < want {
        let mut deadline = Deadline::after(Duration::from_secs(10));
        match buf.fill(stream, &mut deadline).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                got.extend_from_slice(buf.data());
                buf.consume(buf.len());
            }
        }
    }
    got
}

#[tokio::test]
async fn two_megabytes_through_full_sockets_arrive_once_and_in_order() {
    let (client, mut server) = pair().await;
    let data: Arc<Vec<u8>> = Arc::new((0..2_000_000u32).map(|i| (i % 251) as u8).collect());
    let sent = Arc::clone(&data);
    // The writer runs ahead of the reader, so the socket fills and writes see
    // WouldBlock midway through their records.
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(100_000) {
            net::write_all(&client, &[chunk], Duration::from_secs(10)).await.unwrap();
        }
        client
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = read_all(&mut server, data.len()).await;
    let _client = writer.await.unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == *data, "bytes differ");
}

#[tokio::test]
async fn decrypted_plaintext_is_readable_without_a_socket_event() {
    let (client, server) = pair().await;
    net::write_all(&client, &[b"hello world"], Duration::from_secs(5)).await.unwrap();
    server.readable().await.unwrap();
    let mut one = [0u8; 1];
    // A read may first see only part of the record: wait for the first byte.
    let n = loop {
        match server.try_read(&mut one) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                server.readable().await.unwrap()
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!((n, &one), (1, b"h"));
    // The rest is decrypted and waiting; nothing new arrives on the socket.
    tokio::time::timeout(Duration::from_millis(200), server.readable())
        .await
        .expect("buffered plaintext counts as readable")
        .unwrap();
    let mut rest = [0u8; 64];
    let n = server.try_read(&mut rest).unwrap();
    assert_eq!(rest.get(..n), Some(&b"ello world"[..]));
}

#[tokio::test]
async fn a_close_without_close_notify_is_an_end_of_stream() {
    let (client, mut server) = pair().await;
    net::write_all(&client, &[b"bye"], Duration::from_secs(5)).await.unwrap();
    // Dropping closes the socket without TLS's close_notify.
    drop(client);
    assert_eq!(read_all(&mut server, 1000).await, b"bye");
}

#[tokio::test]
async fn close_notify_then_fin_ends_the_peers_stream() {
    let (client, mut server) = pair().await;
    net::write_all(&client, &[b"done"], Duration::from_secs(5)).await.unwrap();
    client.shutdown_write();
    assert_eq!(read_all(&mut server, 1000).await, b"done");
    drop(client);
}
