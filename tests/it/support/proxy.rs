//! holdfast under test: started in-process from a [`Config`] ([`Proxy`]), or as the real
//! binary in a child process that is killed on drop ([`ChildProxy`]).

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast::Config;
use holdfast_pool::PoolStatsSnapshot;
use tokio::time::Instant;

use super::{HttpClient, Origin, RawClient, ReservedPort, DEADLINE};

/// Quick-mode config: a listener on `127.0.0.1:0` in front of `origin`.
pub fn config_for(origin: &Origin) -> Config {
    config_to(origin.addr())
}

/// Quick-mode config: a listener on `127.0.0.1:0` in front of the backend `addr`.
pub fn config_to(addr: SocketAddr) -> Config {
    Config::quick(loopback_any_port(), vec![addr])
}

/// A listener on `127.0.0.1:0` in front of one group, `app`, of `servers`; `extra` is
/// written into the group's table (its `balance`, `[upstream.app.health]`, ...).
pub fn group_config(servers: &[SocketAddr], extra: &str) -> Config {
    let servers: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
         [upstream.app]\nservers = [{}]\n{extra}\n",
        servers.join(", ")
    );
    Config::parse(&text, std::path::Path::new("group.toml")).expect("a valid config")
}

/// [`config_for`] with an admin listener on `127.0.0.1:0`.
pub fn config_with_admin(origin: &Origin) -> Config {
    let mut config = config_for(origin);
    config.admin = Some(loopback_any_port());
    config
}

fn loopback_any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// holdfast running in this process.
pub struct Proxy {
    server: Option<holdfast::Instance>,
    addr: SocketAddr,
}

impl Proxy {
    pub async fn start(config: Config) -> Proxy {
        let server = holdfast::Instance::start(&config).await.expect("holdfast starts");
        let addr = server.local_addrs()[0];
        Proxy { server: Some(server), addr }
    }

    /// holdfast started from the config file at `path`, which [`Proxy::reload`] reads
    /// again.
    pub async fn start_file(path: &std::path::Path) -> Proxy {
        let config = Config::load(path).expect("a valid config file");
        let source = holdfast::ConfigSource { path: path.to_path_buf(), adjust: Box::new(|_| {}) };
        let server =
            holdfast::Instance::start_from(&config, Some(source)).await.expect("holdfast starts");
        let addr = server.local_addrs()[0];
        Proxy { server: Some(server), addr }
    }

    /// Re-reads the config file, like SIGHUP; what changed, in the words
    /// `holdfast reload` prints.
    pub async fn reload(&self) -> Result<String, holdfast::ReloadError> {
        super::within("reload", self.server().reload()).await.map(|diff| diff.to_string())
    }

    /// Pool and retry counters of every backend in force.
    pub fn stats(&self) -> Vec<holdfast::BackendStats> {
        self.server().stats()
    }

    /// The listener's bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's bound address (the config must ask for one).
    pub fn admin(&self) -> SocketAddr {
        self.server().admin_addr().expect("config has an admin listener")
    }

    /// A scrape of `/metrics`.
    pub async fn metrics(&self) -> super::Metrics {
        super::Metrics::scrape(self.admin()).await
    }

    pub fn server(&self) -> &holdfast::Instance {
        self.server.as_ref().expect("server is running")
    }

    /// Pool counters of the one backend.
    pub fn pool(&self) -> PoolStatsSnapshot {
        let stats = self.server().stats();
        assert_eq!(stats.len(), 1, "expected exactly one backend");
        stats[0].pool.clone()
    }

    /// A new keep-alive client connection to the proxy.
    pub async fn client(&self) -> HttpClient {
        HttpClient::connect(self.addr).await
    }

    /// A new raw client connection to the proxy.
    pub async fn raw(&self) -> RawClient {
        RawClient::connect(self.addr).await
    }

    pub async fn shutdown(mut self, drain: Duration) {
        let server = self.server.take().expect("server is running");
        super::within("holdfast shutdown", server.shutdown(drain)).await;
    }
}

/// The holdfast binary running as a child process; killed when dropped.
pub struct ChildProxy {
    child: Child,
    addr: SocketAddr,
    /// Held while the child lives, so its listen port is nobody else's.
    _port: ReservedPort,
    stderr: Arc<Mutex<String>>,
}

impl Drop for ChildProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ChildProxy {
    /// `holdfast --listen 127.0.0.1:PORT --upstream UPSTREAM --threads 2`.
    pub async fn quick(upstream: SocketAddr) -> ChildProxy {
        ChildProxy::launch(|listen| {
            [
                "--listen".to_string(),
                listen.to_string(),
                "--upstream".to_string(),
                upstream.to_string(),
                "--threads".to_string(),
                "2".to_string(),
            ]
            .into()
        })
        .await
    }

    /// Runs the binary with the arguments `args(listen)` gives for a listen address
    /// reserved for it (a [`ReservedPort`] the returned value holds, so no one else takes
    /// the port before the child listens on it, or after it exits).
    pub async fn launch(args: impl Fn(SocketAddr) -> Vec<String>) -> ChildProxy {
        ChildProxy::launch_wrapped(&[], args).await
    }

    /// [`ChildProxy::launch`] with environment variables changed: each is set to its
    /// value, or removed when that is `None`. By default the child gets
    /// `RUST_LOG=holdfast=info` and `NO_COLOR=1`.
    pub async fn launch_env(
        env: &[(&str, Option<&str>)],
        args: impl Fn(SocketAddr) -> Vec<String>,
    ) -> ChildProxy {
        ChildProxy::launch_with(&[], env, args).await
    }

    /// [`ChildProxy::launch`] through `wrapper`: the command line is the wrapper's
    /// words, then the binary's path, then its arguments (for example `unshare ... sh
    /// -c 'mount ... && exec "$@"' ARG0`). The wrapper must exec the binary, so the
    /// child is holdfast itself.
    pub async fn launch_wrapped(
        wrapper: &[String],
        args: impl Fn(SocketAddr) -> Vec<String>,
    ) -> ChildProxy {
        ChildProxy::launch_with(wrapper, &[], args).await
    }

    async fn launch_with(
        wrapper: &[String],
        env: &[(&str, Option<&str>)],
        args: impl Fn(SocketAddr) -> Vec<String>,
    ) -> ChildProxy {
        let port = ReservedPort::new();
        let mut child = ChildProxy::spawn(wrapper, env, &args(port.addr()), port);
        if let Err(e) = child.wait_listening().await {
            panic!("holdfast binary did not start listening: {e}");
        }
        child
    }

    fn spawn(
        wrapper: &[String],
        env: &[(&str, Option<&str>)],
        args: &[String],
        port: ReservedPort,
    ) -> ChildProxy {
        let binary = env!("CARGO_BIN_EXE_holdfast").to_string();
        let words: Vec<&String> = wrapper.iter().chain([&binary]).chain(args).collect();
        let mut command = Command::new(words[0]);
        command.args(&words[1..]).env("RUST_LOG", "holdfast=info").env("NO_COLOR", "1");
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn holdfast binary");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let sink = Arc::clone(&stderr);
        // Drains stderr so the child never blocks on a full pipe; ends at the child's exit.
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        ChildProxy { child, addr: port.addr(), _port: port, stderr }
    }

    /// Waits until a TCP connect to the listen address succeeds, or the child exits.
    async fn wait_listening(&mut self) -> Result<(), String> {
        let start = Instant::now();
        // Bounded by DEADLINE; each round waits 10 ms.
        while start.elapsed() < DEADLINE {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status}: {}", self.stderr()));
            }
            // The port is reserved, so whatever accepts on it is the child.
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(format!("not listening on {} after {DEADLINE:?}: {}", self.addr, self.stderr()))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends SIGTERM, as a service manager does to stop the process.
    #[cfg(unix)]
    pub fn terminate(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }

    /// Sends `signal` to the process.
    #[cfg(unix)]
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        use nix::sys::signal::kill;
        use nix::unistd::Pid;
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits in i32"));
        kill(pid, signal).unwrap_or_else(|e| panic!("send {signal} to holdfast: {e}"));
    }

    /// The child's exit status if it has exited, without waiting.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll holdfast's exit")
    }

    /// Waits for the child to exit; panics if it is still running after `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let start = Instant::now();
        // Bounded by `deadline`; each round waits 10 ms.
        loop {
            if let Some(status) = self.child.try_wait().expect("poll holdfast's exit") {
                return status;
            }
            assert!(
                start.elapsed() < deadline,
                "holdfast still running {deadline:?} later: {}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// What the child has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The child's peak resident memory (`VmHWM` in `/proc/PID/status`), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read /proc/PID/status");
        let line =
            status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
        let kb: u64 = line
            .trim_start_matches("VmHWM:")
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .expect("VmHWM in kB");
        kb * 1024
    }
}
