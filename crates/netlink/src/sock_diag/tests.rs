//! The encoding byte for byte, against `linux/inet_diag.h`'s layout
//! (little-endian hosts: the host-order fields are written out).

use super::*;

fn id(src: &str, dst: &str, interface: u32, cookie: u64) -> SockId {
    SockId { src: src.parse().expect("literal"), dst: dst.parse().expect("literal"), interface, cookie }
}

#[cfg(target_endian = "little")]
#[test]
fn a_destroy_request_names_the_socket_by_its_sockid_and_cookie() {
    let request =
        encode(SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, 7, &id("10.0.0.1:4000", "10.1.0.1:53", 3, 0x1122334455667788));
    #[rustfmt::skip]
    let want: Vec<u8> = [
        // nlmsghdr: length 72, SOCK_DESTROY, REQUEST|ACK, seq 7, pid 0
        &[72, 0, 0, 0, 21, 0, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0][..],
        // inet_diag_req_v2: AF_INET, IPPROTO_UDP, no extensions, every state
        &[2, 17, 0, 0, 0xff, 0xff, 0xff, 0xff],
        // sockid: ports big-endian (4000 = 0x0fa0, 53)
        &[0x0f, 0xa0, 0, 53],
        &[10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[10, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        // interface, cookie low half, high half
        &[3, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
    ]
    .concat();
    assert_eq!(request, want);
}

#[cfg(target_endian = "little")]
#[test]
fn a_dump_request_asks_for_every_udp_socket_of_the_family() {
    let empty = SockId { src: unspecified(IpFamily::V6), dst: unspecified(IpFamily::V6), interface: 0, cookie: 0 };
    let request = encode(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 2, &empty);
    assert_eq!(request.len(), 72);
    assert_eq!(&request[4..8], &[20, 0, 0x01, 0x03], "SOCK_DIAG_BY_FAMILY, REQUEST|DUMP");
    assert_eq!(&request[16..24], &[10, 17, 0, 0, 0xff, 0xff, 0xff, 0xff], "AF_INET6, UDP, every state");
    assert!(request[24..].iter().all(|b| *b == 0), "no socket named");
}

/// One answer message as the kernel lays it out (nlmsghdr, inet_diag_msg,
/// and an attribute the decoder skips).
#[cfg(target_endian = "little")]
fn answer(family: u8, sockid: &[u8]) -> Vec<u8> {
    let mut msg = vec![family, 1, 0, 0];
    msg.extend_from_slice(sockid);
    msg.extend_from_slice(&[0; 20]); // expires, rqueue, wqueue, uid, inode
    msg.extend_from_slice(&[8, 0, 5, 0, 0, 0, 0, 0]); // an attribute
    let mut out = Vec::new();
    out.extend_from_slice(&((16 + msg.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&[20, 0, 2, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&msg);
    out
}

#[cfg(target_endian = "little")]
#[test]
fn dump_answers_decode_to_sockets_until_done() {
    let mut v4 = Vec::new();
    encode_sockid(&mut v4, &id("10.0.0.1:4000", "10.1.0.1:53", 0, 0xdead_beef_0000_0001));
    let mut v6 = Vec::new();
    encode_sockid(&mut v6, &id("[fd00::1]:4000", "[::ffff:10.1.0.1]:53", 2, 5));
    let mut buf = answer(AF_INET, &v4);
    buf.extend(answer(AF_INET6, &v6));
    buf.extend_from_slice(&[20, 0, 0, 0, 3, 0, 2, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let answers = decode(&buf).expect("well formed");
    assert_eq!(
        answers,
        vec![
            Answer::Socket(id("10.0.0.1:4000", "10.1.0.1:53", 0, 0xdead_beef_0000_0001)),
            Answer::Socket(id("[fd00::1]:4000", "[::ffff:10.1.0.1]:53", 2, 5)),
            Answer::Done,
        ]
    );
}

#[cfg(target_endian = "little")]
#[test]
fn errors_carry_the_errno_and_a_short_message_is_malformed() {
    // NLMSG_ERROR -ENOENT, with the request's header after it.
    let mut buf = vec![36, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
    buf.extend_from_slice(&(-2i32).to_ne_bytes());
    buf.extend_from_slice(&[0; 16]);
    assert_eq!(decode(&buf).expect("well formed"), vec![Answer::Error(2)]);
    let mut short = vec![20, 0, 0, 0, 20, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
    short.extend_from_slice(&[2, 1, 0, 0]);
    assert!(matches!(decode(&short), Err(SockDiagError::Decode { at: 0 })));
    assert!(matches!(decode(&short[..18]), Err(SockDiagError::Decode { at: 0 })), "length past the buffer");
}
