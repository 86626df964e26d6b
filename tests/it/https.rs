//! What a listener answers for itself around HTTPS: the redirect of a cleartext
//! listener to HTTPS, HSTS on an HTTPS listener's responses, and the HTTPS example
//! config with the certificates it names.

use std::path::Path;
use std::process::Command;

use holdfast::Config;

use crate::support::tls::{have_tool, Ca, PemFiles};
use crate::support::{Origin, Proxy, RawClient, RawOrigin, TempDir};

/// A CA and a certificate it signed for `localhost`, written to `dir`: the CA's file,
/// and the certificate's.
fn certificates(dir: &TempDir) -> (std::path::PathBuf, PemFiles) {
    let ca = Ca::new("holdfast test CA");
    let files = ca.leaf("localhost", &["localhost"]).write(dir, "cert");
    (ca.write(dir, "ca.pem"), files)
}

/// A config with one listener (`listener` is written into its table) in front of
/// `origin`.
fn config(origin: std::net::SocketAddr, listener: &str, dir: &TempDir) -> Config {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n{listener}\n\n\
         [upstream.app]\nservers = [\"{origin}\"]\n"
    );
    let path = dir.write("holdfast.toml", &text);
    Config::load(&path).expect("a valid config")
}

/// The response head curl saw for `url`, lowercase, trusting `ca`.
async fn curl_head(url: String, ca: &Path) -> String {
    let ca = ca.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10", "--cacert"])
            .arg(&ca)
            .arg(&url)
            .output()
            .expect("curl runs")
    })
    .await
    .expect("curl finished");
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

#[tokio::test]
async fn redirect_https_sends_clients_to_the_same_url_over_https() {
    let origin = Origin::start().await;
    let dir = TempDir::new("redirect");
    let proxy = Proxy::start(config(origin.addr(), "redirect_https = 8443", &dir)).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET /shop/cart?item=7&n=2 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n").await;
    let reply = client.response().await;
    assert_eq!(reply.status, 308);
    assert_eq!(reply.header("location"), Some("https://example.com:8443/shop/cart?item=7&n=2"));
    // The connection stays open for the next request, and OPTIONS * goes to /.
    client.send("OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n").await;
    let reply = client.response().await;
    assert_eq!(reply.header("location"), Some("https://example.com:8443/"));
    assert_eq!(origin.request_count(), 0, "a redirected request never reaches the origin");
}

#[tokio::test]
async fn redirect_to_443_leaves_the_port_out_and_needs_a_host() {
    let origin = Origin::start().await;
    let dir = TempDir::new("redirect-443");
    let proxy = Proxy::start(config(origin.addr(), "redirect_https = true", &dir)).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET /a HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n").await;
    assert_eq!(client.response().await.header("location"), Some("https://[::1]/a"));
    // HTTP/1.0 without Host: nowhere to redirect to, and never forwarded in cleartext.
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET /a HTTP/1.0\r\n\r\n").await;
    let reply = client.response().await;
    assert_eq!(reply.status, 400);
    assert!(reply.body_text().contains("cannot redirect to HTTPS"), "{}", reply.body_text());
    assert_eq!(origin.request_count(), 0);
}

#[tokio::test]
async fn hsts_goes_on_https_responses_unless_the_origin_sent_its_own() {
    if !have_tool("curl") {
        return;
    }
    let dir = TempDir::new("hsts");
    let (ca, files) = certificates(&dir);
    let tls = format!("hsts = \"365d\"\n[listener.tls]\n{}", files.toml());
    let origin = Origin::start().await;
    let proxy = Proxy::start(config(origin.addr(), &tls, &dir)).await;
    let url = format!("https://localhost:{}/", proxy.addr().port());
    let head = curl_head(url, &ca).await;
    assert!(head.contains("strict-transport-security: max-age=31536000\r\n"), "{head}");
    let seen = origin.requests();
    assert_eq!(seen[0].header("x-forwarded-proto"), Some("https"));
    assert!(seen[0].header("forwarded").is_some_and(|f| f.ends_with(";proto=https")));

    // An origin with its own policy keeps it, alone.
    let own = RawOrigin::start(
        b"HTTP/1.1 200 OK\r\nstrict-transport-security: max-age=60\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    let dir2 = TempDir::new("hsts-own");
    let proxy = Proxy::start(config(own.addr(), &tls, &dir2)).await;
    let head = curl_head(format!("https://localhost:{}/", proxy.addr().port()), &ca).await;
    assert_eq!(head.matches("strict-transport-security").count(), 1, "{head}");
    assert!(head.contains("max-age=60"), "{head}");
}

#[tokio::test]
async fn no_hsts_on_cleartext() {
    let origin = Origin::start().await;
    let dir = TempDir::new("hsts-cleartext");
    let proxy = Proxy::start(config(origin.addr(), "hsts = \"1d\"", &dir)).await;
    let reply = proxy.client().await.get("/").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("strict-transport-security"), None);
}

#[test]
fn the_https_example_passes_check_with_the_certificates_it_names() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tls/https.toml");
    let dir = TempDir::new("example-https");
    std::fs::create_dir_all(dir.path().join("certs")).unwrap();
    let ca = Ca::new("holdfast test CA");
    let leaf = ca.leaf("example.com", &["example.com", "*.example.com"]);
    let certs = dir.path().join("certs");
    for name in ["example.com", "wildcard.example.com", "holdfast-client"] {
        leaf.write(&dir, name);
        for ext in ["pem", "key"] {
            let file = format!("{name}.{ext}");
            std::fs::rename(dir.path().join(&file), certs.join(&file)).unwrap();
        }
    }
    std::fs::rename(ca.write(&dir, "internal-ca.pem"), certs.join("internal-ca.pem")).unwrap();
    let copy = dir.path().join("https.toml");
    std::fs::copy(&example, &copy).unwrap();
    if let Err(e) = Config::load(&copy) {
        panic!("examples/tls/https.toml: {e}");
    }
    // Without the files, check names the file, line and key.
    std::fs::remove_file(certs.join("example.com.pem")).unwrap();
    let error = Config::load(&copy).expect_err("a missing certificate file").to_string();
    assert!(error.contains("listener[1].tls.certificates[0].cert"), "{error}");
    assert!(error.contains("example.com.pem"), "{error}");
}

#[test]
fn the_acme_example_passes_check() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tls/acme.toml");
    let dir = TempDir::new("example-acme");
    let copy = dir.path().join("acme.toml");
    std::fs::copy(&example, &copy).unwrap();
    let config = Config::load(&copy).unwrap_or_else(|e| panic!("examples/tls/acme.toml: {e}"));
    assert!(config.listeners[0].tls.as_ref().is_some_and(|t| t.acme));
    assert_eq!(config.listeners[1].redirect_https, Some(443));
    assert_eq!(config.acme_names(), ["shop.example.com", "blog.example.com"]);
}
