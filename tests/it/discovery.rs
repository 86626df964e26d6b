//! Server names followed through the system resolver. The binary runs in a mount
//! namespace of its own whose `/etc/hosts` is a file the test rewrites, so the name's
//! addresses change the way a container platform's DNS answers do.
//!
//! Needs root (a mount namespace); where that is not permitted the test says so and
//! passes without running, like the port-exhaustion tests, except under `CI=true`,
//! where it fails.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use tokio::net::TcpListener;

use crate::support::{
    skip_or_fail, wait_until, ChildProxy, HttpClient, Origin, OriginOptions, TempDir, DEADLINE,
};

const NAME: &str = "app.holdfast.test";

/// Whether this process may create a mount namespace and bind-mount over /etc/hosts.
fn mount_namespace_works(hosts: &Path) -> Result<(), String> {
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount --bind \"$0\" /etc/hosts")
        .arg(hosts)
        .output()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The hosts file naming `NAME` at `ips`.
fn hosts(ips: &[&str]) -> String {
    let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for ip in ips {
        text.push_str(&format!("{ip} {NAME}\n"));
    }
    text
}

/// Two origins on the same port, at 127.0.0.1 and 127.0.0.2 (a name gives every
/// address the same port).
async fn origins_sharing_a_port() -> (Origin, Origin) {
    for _ in 0..20 {
        let first = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = first.local_addr().expect("addr").port();
        if let Ok(second) = TcpListener::bind(("127.0.0.2", port)).await {
            let options = OriginOptions::default();
            return (Origin::serve(first, options.clone()), Origin::serve(second, options));
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

/// The origin that answers the next `GET /`.
async fn served_by(client: &mut HttpClient) -> String {
    let reply = client.get("/").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.header("x-origin").unwrap_or("-").to_string()
}

/// Sends requests until `origin` answers one; panics naming `what` (and holdfast's log)
/// if none does within [`DEADLINE`].
async fn until_served_by(client: &mut HttpClient, origin: &Origin, what: &str, proxy: &ChildProxy) {
    let start = tokio::time::Instant::now();
    // Bounded by DEADLINE; each round sends one request and waits 10 ms.
    while served_by(client).await != origin.addr().to_string() {
        assert!(start.elapsed() < DEADLINE, "{what}: {}", proxy.stderr());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_name_is_resolved_again_and_its_servers_follow_the_answers() {
    let dir = TempDir::new("discovery");
    let hosts_file = dir.write("hosts", &hosts(&["127.0.0.1"]));
    if let Err(why) = mount_namespace_works(&hosts_file) {
        skip_or_fail(&format!("this test needs a mount namespace of its own ({why})"));
        return;
    }
    let (first, second) = origins_sharing_a_port().await;
    let port = first.addr().port();
    let wrapper: Vec<String> = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "mount --bind \"$0\" /etc/hosts && exec \"$@\"".to_string(),
            hosts_file.display().to_string(),
        ])
        .collect();
    let proxy = ChildProxy::launch_wrapped(&wrapper, |listen: SocketAddr| {
        let config = format!(
            "threads = 2\n\n[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\n\n\
             [upstream.app]\nservers = [\"{NAME}:{port}\"]\nresolve_interval = \"100ms\"\n\
             balance = \"round_robin\"\n"
        );
        vec!["--config".into(), dir.write("holdfast.toml", &config).display().to_string()]
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    assert_eq!(served_by(&mut client).await, first.addr().to_string());

    // The name moves: new requests follow it, and the old server's pool drains.
    std::fs::write(&hosts_file, hosts(&["127.0.0.2"])).expect("rewrite the hosts file");
    until_served_by(&mut client, &second, "requests never reached the new address", &proxy).await;
    wait_until("the vanished address's connections close", DEADLINE, || {
        first.closed() == first.accepted()
    })
    .await;
    let before = first.request_count();
    for _ in 0..10 {
        assert_eq!(served_by(&mut client).await, second.addr().to_string());
    }
    assert_eq!(first.request_count(), before, "no request goes to the vanished address");

    // Two addresses: both get a pool and requests.
    std::fs::write(&hosts_file, hosts(&["127.0.0.1", "127.0.0.2"])).expect("rewrite");
    until_served_by(&mut client, &first, "the added address got no request", &proxy).await;
    // Logged as holdfast makes the changes, but read from the child's stderr on a thread
    // of the test's own, which may not have got there yet.
    wait_until("the changes are logged", DEADLINE, || {
        let stderr = proxy.stderr();
        stderr.contains("backend added") && stderr.contains("backend removed; draining")
    })
    .await;
}
