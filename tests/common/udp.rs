//! Shared by the loopback tests: one channel joined on 127.0.0.1 and the real rx loop on a
//! thread of its own, feeding one consumer queue.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use gapless::drive::live::{ChannelAddress, RxLoop, RxOptions, RxResult, RxShared, UdpVenue};
use gapless::io::idle::IdleStrategy;
use gapless::io::socket::MulticastSpec;
use gapless::publish::fanout::Fanout;
use gapless::publish::{self, Consumer};
use gapless::sinks::pcap::PcapTap;
use gapless::venue::{ChannelSpec, FeedSpec, Wire};

/// A running rx loop and its consumer.
pub struct Handler {
    pub shared: RxShared,
    pub rx: JoinHandle<std::io::Result<RxResult>>,
    pub consumer: Consumer,
}

impl Handler {
    /// Stops the loop and returns what it hands back.
    pub fn stop(self) -> RxResult {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.rx.join().expect("rx thread").expect("rx loop")
    }
}

/// A one-channel spec expecting sequence 1, with `rerequest` as its server if any.
pub fn spec(wire: Wire, rerequest: Option<SocketAddrV4>) -> FeedSpec {
    let channel = ChannelSpec {
        name: "a".into(),
        session: None,
        rerequest: rerequest.map(SocketAddr::V4).into_iter().collect(),
        snapshot: None,
    };
    let mut spec = FeedSpec::new(wire, vec![channel]);
    spec.start_from = Some(1);
    spec
}

/// Joins `group` on 127.0.0.1 and runs the rx loop (recording into `tap` when given).
pub fn start(
    spec: FeedSpec,
    group: SocketAddrV4,
    idle: IdleStrategy,
    queue_bytes: usize,
    tap: Option<PcapTap>,
) -> Handler {
    let address = ChannelAddress {
        multicast: MulticastSpec {
            group,
            interface: Ipv4Addr::LOCALHOST,
            source: None,
            rcvbuf: 4 << 20,
        },
    };
    let (venue, _) = UdpVenue::open("sim", spec, &[address]).expect("join the group");
    let (producer, consumer) = publish::channel(queue_bytes, 1);
    let shared = RxShared::default();
    let options = RxOptions {
        idle,
        ..RxOptions::default()
    };
    let mut rx_loop = RxLoop::new(
        vec![venue],
        Vec::new(),
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .expect("poll");
    if let Some(tap) = tap {
        rx_loop = rx_loop.with_recorder(tap);
    }
    let rx = std::thread::spawn(move || rx_loop.run());
    Handler {
        shared,
        rx,
        consumer,
    }
}
