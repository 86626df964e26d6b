//! The static table of RFC 7541 Appendix A: its entries by index for the decoder, and
//! for the encoder the index of a name or of a whole field, found by a `match` on the
//! name rather than a hash of the table.

/// The 61 entries, index 1 first (RFC 7541 Appendix A).
pub(crate) const ENTRIES: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The index of the first dynamic entry, just past the static ones (section 2.3.3).
pub(crate) const FIRST_DYNAMIC_INDEX: usize = 62;

/// The entry at `index` (1-based), if the static table has one.
pub(crate) fn get(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    ENTRIES.get(index.checked_sub(1)?).copied()
}

/// The first index whose entry has `name`.
pub(crate) fn name_index(name: &[u8]) -> Option<usize> {
    let index = match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    };
    Some(index)
}

/// The index of the entry with both `name` and `value`: the entries of one name are
/// consecutive, at most 7 (`:status`), so this looks at those only.
pub(crate) fn field_index(name: &[u8], value: &[u8]) -> Option<usize> {
    let first = name_index(name)?;
    let same_name = ENTRIES.get(first.checked_sub(1)?..)?;
    let offset = same_name
        .iter()
        .take_while(|(entry_name, _)| *entry_name == name)
        .position(|(_, entry_value)| *entry_value == value)?;
    first.checked_add(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_index_is_the_first_entry_with_the_name() {
        for (position, (name, _)) in ENTRIES.iter().enumerate() {
            let first = ENTRIES.iter().position(|(other, _)| other == name).unwrap() + 1;
            assert_eq!(name_index(name), Some(first), "{}", String::from_utf8_lossy(name));
            assert!(first <= position + 1);
        }
        assert_eq!(name_index(b"x-custom"), None);
        assert_eq!(name_index(b"Host"), None);
        assert_eq!(name_index(b""), None);
    }

    #[test]
    fn field_index_finds_every_entry() {
        for (position, (name, value)) in ENTRIES.iter().enumerate() {
            assert_eq!(field_index(name, value), Some(position + 1));
            assert_eq!(get(position + 1), Some((*name, *value)));
        }
        assert_eq!(field_index(b":status", b"201"), None);
        assert_eq!(field_index(b":method", b""), None);
        assert_eq!(field_index(b"accept-encoding", b""), None);
        assert_eq!(field_index(b"age", b"1"), None);
        assert_eq!(get(0), None);
        assert_eq!(get(62), None);
    }

    #[test]
    fn spot_checks_against_appendix_a() {
        assert_eq!(FIRST_DYNAMIC_INDEX, ENTRIES.len() + 1);
        assert_eq!(get(1), Some((&b":authority"[..], &b""[..])));
        assert_eq!(get(16), Some((&b"accept-encoding"[..], &b"gzip, deflate"[..])));
        assert_eq!(get(61), Some((&b"www-authenticate"[..], &b""[..])));
    }
}
