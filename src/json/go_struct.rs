//! How Go's `encoding/json` decodes an object into a struct, the part a reader of Go-decoded documents
//! (libcni's, the container runtime's) must copy exactly:
//! - a key names a field when it equals the field's name exactly or, failing that, ignoring case
//!   ([`key_matches`]); keys naming no field are skipped;
//! - every matching key is decoded in turn, so the last one wins, except that `null` leaves a string,
//!   number, bool or struct field as it was ([`last_match`]);
//! - a value of the wrong kind under any matching key is an error, even when a later key would fix it.

/// Whether Go decodes the object key `key` into the struct field named `field` (an ASCII name, as every
/// field we mirror has): equal ignoring ASCII case, where U+017F (ſ) also stands for `s` and U+212A (the
/// Kelvin sign) for `k`. Go up to 1.20 spells this `equalFoldRight` and friends, Go 1.21 on compares
/// `foldName`s made with `unicode.SimpleFold`; for an ASCII field name both come to this rule, since ſ and
/// K are the only non-ASCII characters whose fold set holds an ASCII letter (and ı, İ hold none).
pub fn key_matches(key: &str, field: &str) -> bool {
    let mut k = key.chars();
    for f in field.bytes() {
        let ok = match k.next() {
            None => false,
            Some('\u{17f}') => f.eq_ignore_ascii_case(&b's'),
            Some('\u{212a}') => f.eq_ignore_ascii_case(&b'k'),
            Some(c) => c.is_ascii() && (c as u8).eq_ignore_ascii_case(&f),
        };
        if !ok {
            return false;
        }
    }
    k.next().is_none()
}

/// What Go leaves in a string (or struct) field named `field` after decoding `entries` in the order
/// given: the value of the last matching key whose value is not null.
pub fn last_match<'a, V: Copy>(
    entries: impl IntoIterator<Item = (&'a str, V)>,
    field: &str,
    is_null: impl Fn(V) -> bool,
) -> Option<V> {
    entries
        .into_iter()
        .filter(|(k, v)| key_matches(k, field) && !is_null(*v))
        .last()
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_folding_of_keys() {
        for key in ["type", "TYPE", "tYpE", "\u{74}ype"] {
            assert!(key_matches(key, "type"), "{key}");
        }
        assert!(key_matches("cniVer\u{17f}ion", "cniVersion"));
        assert!(key_matches("CNIVER\u{17f}ION", "cniVersion"));
        assert!(key_matches("\u{212a}ubernetes", "kubernetes"));
        assert!(key_matches("\u{212a}UBERNETES", "Kubernetes"));
        for (key, field) in [
            ("\u{17f}ype", "type"),                 // ſ is s only
            ("\u{212a}ype", "type"),                // K is k only
            ("capab\u{131}lities", "capabilities"), // dotless ı is not i
            ("capab\u{130}lities", "capabilities"), // İ is not i
            ("\u{ff54}ype", "type"),                // fullwidth t
            ("types", "type"),
            ("typ", "type"),
            ("", "type"),
            ("a_b", "a-b"),
            ("a@", "a`"), // only letters fold
        ] {
            assert!(!key_matches(key, field), "{key:?} must not match {field:?}");
        }
    }

    #[test]
    fn the_last_non_null_match_wins() {
        let entries = [
            ("TYPE", Some("a")),
            ("Type", Some("b")),
            ("type", None),
            ("x", Some("c")),
        ];
        assert_eq!(
            last_match(entries.iter().map(|(k, v)| (*k, *v)), "type", |v| v
                .is_none()),
            Some(Some("b"))
        );
        assert_eq!(
            last_match(entries.iter().map(|(k, v)| (*k, *v)), "name", |v| v
                .is_none()),
            None
        );
    }
}
