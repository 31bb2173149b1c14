//! `gapless top` as an operator sees it: in a terminal (tmux), against a running daemon,
//! redrawn in place.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gapless");

fn tmux(server: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", server])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn top_shows_the_streams_in_a_terminal_and_redraws_in_place() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("gapless-top-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("gapless.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\nidle = \"block\"\n\n\
             [[venue]]\nname = \"quiet\"\nkind = \"moldudp64\"\n\n\
             [[venue.channel]]\nname = \"a\"\ngroup = \"239.255.64.11:46411\"\n\
             interface = \"127.0.0.1\"\nrerequest = [\"127.0.0.1:9\"]\n\n\
             [[sink]]\nkind = \"unix\"\npath = \"{}\"\n",
            dir.join("t.sock").display()
        ),
    )
    .unwrap();
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::null(), None);

    let server = format!("gapless-top-{}", std::process::id());
    let command = format!("{BIN} top --metrics 127.0.0.1:{port} --interval-ms 200");
    let started = tmux(
        &server,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "150",
            "-y",
            "30",
            &command,
        ],
    );
    assert!(started.status.success(), "{started:?}");
    let capture =
        || String::from_utf8(tmux(&server, &["capture-pane", "-p", "-t", "top"]).stdout).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut screen = capture();
    while !screen.contains("quiet/a") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        screen = capture();
    }
    // Several refreshes later the screen still holds one table: redrawn, not scrolled.
    std::thread::sleep(Duration::from_millis(1000));
    let later = capture();
    let _ = tmux(&server, &["kill-server"]);
    // SAFETY: signalling the child process this test started.
    unsafe {
        libc::kill(daemon.id() as libc::pid_t, libc::SIGTERM);
    }
    let stop = Instant::now() + Duration::from_secs(20);
    while daemon.try_wait().unwrap().is_none() && Instant::now() < stop {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(screen.contains("quiet/a"), "{screen}");
    let row = later
        .lines()
        .find(|l| l.starts_with("quiet/a"))
        .unwrap_or("");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.get(1), Some(&"unseen"), "{later}");
    assert_eq!(later.matches("gapless top - ").count(), 1, "{later}");
    assert_eq!(later.matches("quiet/a").count(), 1, "{later}");
    assert!(later.contains("unix:"), "the consumer table: {later}");
}
