use super::*;
use crate::xtables::rule::OwnerKind;
use crate::xtables::spec::{parse_doc, save_text};

fn names(_: OwnerKind, n: &str) -> Result<u32> {
    Err(Error::Rules(format!("unknown {n}")))
}

fn run(doc: &str) -> Result<String> {
    let ops = parse_doc(Family::V4, doc, &names)?;
    Ok(save_text(Family::V4, &desired(Family::V4, &ops)?))
}

#[test]
fn chains_come_out_in_save_order_and_inserts_count_from_one() {
    let text = run("*nat\n-N ISTIO_REDIRECT\n-N ISTIO_INBOUND\n-A OUTPUT -j ISTIO_REDIRECT\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A ISTIO_INBOUND -j RETURN\n-I ISTIO_INBOUND 1 -p tcp --dport 15008 -j RETURN\n-I ISTIO_INBOUND 3 -j ISTIO_REDIRECT\nCOMMIT\n").unwrap();
    assert_eq!(
        text,
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_INBOUND - [0:0]\n:ISTIO_REDIRECT - [0:0]\n\
         -A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_REDIRECT\n\
         -A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN\n-A ISTIO_INBOUND -j RETURN\n-A ISTIO_INBOUND -j ISTIO_REDIRECT\nCOMMIT\n"
    );
}

#[test]
fn what_the_kernel_refuses_is_refused() {
    for (doc, says) in [
        ("*nat\n-N A\n-N A\nCOMMIT\n", "-N A: chain already exists"),
        (
            "*nat\n-N OUTPUT\nCOMMIT\n",
            "-N OUTPUT: chain already exists",
        ),
        ("*nat\n-A NOPE -j RETURN\nCOMMIT\n", "no chain NOPE"),
        ("*nat\n-N A\n-A OUTPUT -j A\n-X A\nCOMMIT\n", "-X A"),
        ("*nat\n-N A\n-A A -j RETURN\n-X A\nCOMMIT\n", "-X A"),
        (
            "*nat\n-N A\n-I A 2 -j RETURN\nCOMMIT\n",
            "-I A 2: index out of range",
        ),
        (
            "*nat\n-N A\n-D A -j RETURN\nCOMMIT\n",
            "-D A -j RETURN: no such rule",
        ),
        ("*nat\n-F A\nCOMMIT\n", "-F A: no such chain"),
    ] {
        let e = run(doc).unwrap_err().to_string();
        assert!(e.contains(says), "{doc:?}: {e}");
    }
}

#[test]
fn delete_flush_and_remove_chain() {
    let text = run("*mangle\n-N X\n-A OUTPUT -o eth0 -j RETURN\n-A OUTPUT -j X\n-A X -j ACCEPT\n-D OUTPUT -j X\n-F X\n-X X\nCOMMIT\n").unwrap();
    assert_eq!(
        text,
        "*mangle\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -o eth0 -j RETURN\nCOMMIT\n"
    );
}
