//! The leader wait's DNS reply reader: never panics on any datagram; what it accepts is the
//! reply to the query sent (its id and its one question), and an address it takes is of the
//! type asked.
#![no_main]
use hickory_proto::op::Query;
use hickory_proto::rr::{Name, RecordType};
use infera_exec::resolve::{read_reply, Answer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, &[u8])| {
    let (aaaa, datagram) = input;
    let qtype = if aaaa { RecordType::AAAA } else { RecordType::A };
    let Ok(name) = Name::from_ascii("leader-0.grp.ns.svc.cluster.local.") else { return };
    let question = Query::query(name, qtype);
    let id = 0x4242;
    if let Some(a) = read_reply(datagram, id, &question) {
        assert_eq!(&datagram[..2], &id.to_be_bytes(), "accepted a reply with another id");
        assert!(datagram[2] & 0x80 != 0, "accepted a message that is not a response");
        match a {
            Answer::Addr(ip) => assert_eq!(ip.is_ipv6(), aaaa, "an address of another type"),
            Answer::NxDomain | Answer::NoData => {}
            Answer::Stopped(_) => panic!("a reply read as a signal"),
        }
    }
});
