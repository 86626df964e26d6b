//! The checks RFC 9113 section 8 makes of a decoded field section before it is a
//! message: field names and values (8.2.1), connection-specific fields (8.2.2),
//! pseudo-header fields (8.3) for requests, responses and trailers, extended CONNECT
//! (RFC 8441 section 4), and `content-length` (8.1.1) read for the DATA check.
//!
//! A section that fails is "malformed": a stream error PROTOCOL_ERROR (8.1.1), never a
//! connection error. What HTTP semantics ask beyond HTTP/2 (Host against `:authority`,
//! limits, routing) is the request model's job above the engine.

use bytes::Bytes;

use crate::hpack::Field;

/// The pseudo-header fields of a request or a response (RFC 9113 section 8.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pseudo {
    pub method: Option<Bytes>,
    pub scheme: Option<Bytes>,
    pub authority: Option<Bytes>,
    pub path: Option<Bytes>,
    /// RFC 8441's `:protocol`, on an extended CONNECT.
    pub protocol: Option<Bytes>,
    pub status: Option<u16>,
}

/// A checked field section: its pseudo-header fields, its other fields in order, and
/// the `content-length` it declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    pub pseudo: Pseudo,
    pub fields: Vec<Field>,
    pub content_length: Option<u64>,
}

/// What a section is checked as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// A request's header section, received by a server. `connect_protocol`: we sent
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL = 1, so `:protocol` is allowed (RFC 8441).
    Request { connect_protocol: bool },
    /// A response's header section (final or informational), received by a client.
    Response,
    /// Trailers (no pseudo-header fields at all).
    Trailers,
}

/// Why a section is malformed (for logs; all are PROTOCOL_ERROR on the stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A name with an uppercase letter, a space, a control or non-ASCII byte, a colon
    /// outside a pseudo-header's first byte, or empty (8.2.1).
    FieldName,
    /// A value with NUL, CR or LF, or that starts or ends with a space or tab (8.2.1).
    FieldValue,
    /// `connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`,
    /// or `te` other than a request's `te: trailers` (8.2.2).
    ConnectionSpecific,
    /// A pseudo-header this section may not have, unknown, or repeated (8.3).
    Pseudo,
    /// A pseudo-header after a regular field (8.3).
    PseudoAfterField,
    /// A required pseudo-header is missing or empty (8.3.1, 8.3.2, 8.5).
    MissingPseudo,
    /// `:status` that is not three digits, or 101 (8.3.2, 8.6).
    Status,
    /// `content-length` that is not a number, or two different ones (8.1.1).
    ContentLength,
}

impl Malformed {
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::FieldName => "invalid field name",
            Malformed::FieldValue => "invalid field value",
            Malformed::ConnectionSpecific => "connection-specific field",
            Malformed::Pseudo => "pseudo-header field not allowed here",
            Malformed::PseudoAfterField => "pseudo-header field after a regular field",
            Malformed::MissingPseudo => "required pseudo-header field missing",
            Malformed::Status => "invalid :status",
            Malformed::ContentLength => "invalid content-length",
        }
    }
}

/// Checks a decoded section and sorts it into a [`Head`].
pub fn check(fields: Vec<Field>, section: Section) -> Result<Head, Malformed> {
    let mut head = Head { fields: Vec::with_capacity(fields.len()), ..Head::default() };
    let mut regular_seen = false;
    for field in fields {
        if let Some(name) = field.name.strip_prefix(b":") {
            if regular_seen {
                return Err(Malformed::PseudoAfterField);
            }
            take_pseudo(&mut head.pseudo, name, field.value, section)?;
            continue;
        }
        regular_seen = true;
        check_name(&field.name)?;
        check_value(&field.value)?;
        check_connection_specific(&field, section)?;
        if field.name.as_ref() == b"content-length" {
            let length = parse_length(&field.value).ok_or(Malformed::ContentLength)?;
            if head.content_length.is_some_and(|seen| seen != length) {
                return Err(Malformed::ContentLength);
            }
            head.content_length = Some(length);
        }
        head.fields.push(field);
    }
    check_required(&head.pseudo, section)?;
    Ok(head)
}

/// Stores one pseudo-header field, refusing those the section may not have and repeats.
fn take_pseudo(
    pseudo: &mut Pseudo,
    name: &[u8],
    value: Bytes,
    section: Section,
) -> Result<(), Malformed> {
    let slot = match (section, name) {
        (Section::Request { .. }, b"method") => &mut pseudo.method,
        (Section::Request { .. }, b"scheme") => &mut pseudo.scheme,
        (Section::Request { .. }, b"authority") => &mut pseudo.authority,
        (Section::Request { .. }, b"path") => &mut pseudo.path,
        (Section::Request { connect_protocol: true }, b"protocol") => &mut pseudo.protocol,
        (Section::Response, b"status") => {
            if pseudo.status.is_some() {
                return Err(Malformed::Pseudo);
            }
            pseudo.status = Some(parse_status(&value)?);
            return Ok(());
        }
        _ => return Err(Malformed::Pseudo),
    };
    if slot.is_some() {
        return Err(Malformed::Pseudo);
    }
    check_value(&value)?;
    *slot = Some(value);
    Ok(())
}

/// The pseudo-header fields each kind of section must have.
fn check_required(pseudo: &Pseudo, section: Section) -> Result<(), Malformed> {
    let present = |v: &Option<Bytes>| v.as_ref().is_some_and(|v| !v.is_empty());
    match section {
        Section::Trailers => Ok(()),
        Section::Response => pseudo.status.map(|_| ()).ok_or(Malformed::MissingPseudo),
        Section::Request { .. } => {
            let is_connect = pseudo.method.as_deref() == Some(b"CONNECT");
            let ok = match (is_connect, &pseudo.protocol) {
                // 8.5: CONNECT names its target in :authority and has no :scheme or :path.
                (true, None) => {
                    present(&pseudo.authority) && pseudo.scheme.is_none() && pseudo.path.is_none()
                }
                // RFC 8441 section 4: an extended CONNECT has all four.
                (true, Some(_)) => {
                    present(&pseudo.authority) && present(&pseudo.scheme) && present(&pseudo.path)
                }
                // `:protocol` only with CONNECT.
                (false, Some(_)) => return Err(Malformed::Pseudo),
                // 8.3.1: :method, :scheme and a non-empty :path.
                (false, None) => {
                    present(&pseudo.method) && present(&pseudo.scheme) && present(&pseudo.path)
                }
            };
            if ok {
                Ok(())
            } else {
                Err(Malformed::MissingPseudo)
            }
        }
    }
}

/// 8.2.1: a name is lowercase visible ASCII without a colon (pseudo-headers are taken
/// before this).
fn check_name(name: &[u8]) -> Result<(), Malformed> {
    let bad = |b: &u8| matches!(b, 0x00..=0x20 | b'A'..=b'Z' | b':' | 0x7f..=0xff);
    if name.is_empty() || name.iter().any(bad) {
        return Err(Malformed::FieldName);
    }
    Ok(())
}

/// 8.2.1: no NUL, CR or LF, and no space or tab at either end.
fn check_value(value: &[u8]) -> Result<(), Malformed> {
    let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n'))
        || edge(value.first())
        || edge(value.last())
    {
        return Err(Malformed::FieldValue);
    }
    Ok(())
}

/// 8.2.2: fields that only make sense on one HTTP/1.1 connection. `te` is one of them
/// too, but for the exception the section makes of a request's header section, where
/// it may say `trailers`.
fn check_connection_specific(field: &Field, section: Section) -> Result<(), Malformed> {
    match field.name.as_ref() {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err(Malformed::ConnectionSpecific)
        }
        b"te" => match section {
            Section::Request { .. } if field.value.as_ref() == b"trailers" => Ok(()),
            _ => Err(Malformed::ConnectionSpecific),
        },
        _ => Ok(()),
    }
}

/// A `content-length` value: digits only, fitting a u64.
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let digit = b.is_ascii_digit().then(|| u64::from(b.wrapping_sub(b'0')))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// `:status`: three digits, not 101 (8.6: HTTP/2 has no Switching Protocols).
fn parse_status(value: &[u8]) -> Result<u16, Malformed> {
    let [a, b, c] = value else { return Err(Malformed::Status) };
    if !(a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit()) || *a == b'0' {
        return Err(Malformed::Status);
    }
    let digit = |d: &u8| u16::from(d.wrapping_sub(b'0'));
    let status =
        digit(a).wrapping_mul(100).wrapping_add(digit(b).wrapping_mul(10)).wrapping_add(digit(c));
    if status == 101 {
        return Err(Malformed::Status);
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &'static str, value: &'static str) -> Field {
        Field {
            name: Bytes::from_static(name.as_bytes()),
            value: Bytes::from_static(value.as_bytes()),
            sensitive: false,
        }
    }

    const REQUEST: Section = Section::Request { connect_protocol: false };

    fn get() -> Vec<Field> {
        vec![f(":method", "GET"), f(":scheme", "https"), f(":path", "/"), f(":authority", "a")]
    }

    fn with(mut fields: Vec<Field>, extra: Field) -> Vec<Field> {
        fields.push(extra);
        fields
    }

    #[test]
    fn a_request_is_sorted_into_pseudo_headers_and_fields() {
        let head = check(with(get(), f("content-length", "12")), REQUEST).unwrap();
        assert_eq!(head.pseudo.method.as_deref(), Some(&b"GET"[..]));
        assert_eq!(head.pseudo.authority.as_deref(), Some(&b"a"[..]));
        assert_eq!(head.fields.len(), 1);
        assert_eq!(head.content_length, Some(12));
    }

    #[test]
    fn field_names_and_values_follow_8_2_1() {
        for name in ["Accept", "a b", "a:b", "", "caf\u{e9}"] {
            let field = Field { name: Bytes::from(name.as_bytes().to_vec()), ..f("x", "v") };
            assert_eq!(check(with(get(), field), REQUEST), Err(Malformed::FieldName), "{name:?}");
        }
        for value in ["a\r\nb", "a\0", " a", "a\t"] {
            let field = Field { value: Bytes::from(value.as_bytes().to_vec()), ..f("x", "") };
            assert_eq!(check(with(get(), field), REQUEST), Err(Malformed::FieldValue), "{value:?}");
        }
        assert!(check(with(get(), f("x", "a b")), REQUEST).is_ok(), "inner spaces are fine");
    }

    #[test]
    fn connection_specific_fields_are_malformed_and_te_only_as_trailers() {
        for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]
        {
            let field = Field { name: Bytes::from_static(name.as_bytes()), ..f("x", "a") };
            assert_eq!(check(with(get(), field), REQUEST), Err(Malformed::ConnectionSpecific));
        }
        assert_eq!(
            check(with(get(), f("te", "gzip")), REQUEST),
            Err(Malformed::ConnectionSpecific)
        );
        assert!(check(with(get(), f("te", "trailers")), REQUEST).is_ok());
        // Only a request may carry `te`: in a response it is connection-specific.
        let response = vec![f(":status", "200"), f("te", "trailers")];
        assert_eq!(check(response, Section::Response), Err(Malformed::ConnectionSpecific));
        let trailers = vec![f("te", "trailers")];
        assert_eq!(check(trailers, Section::Trailers), Err(Malformed::ConnectionSpecific));
    }

    #[test]
    fn pseudo_headers_follow_8_3() {
        let mut late =
            vec![f(":method", "GET"), f("x", "1"), f(":scheme", "https"), f(":path", "/")];
        assert_eq!(check(late.clone(), REQUEST), Err(Malformed::PseudoAfterField));
        late.retain(|field| field.name.as_ref() != b"x");
        assert!(check(late, REQUEST).is_ok());
        assert_eq!(check(with(get(), f(":method", "GET")), REQUEST), Err(Malformed::Pseudo));
        assert_eq!(check(with(get(), f(":status", "200")), REQUEST), Err(Malformed::Pseudo));
        assert_eq!(check(with(get(), f(":x", "1")), REQUEST), Err(Malformed::Pseudo));
        let no_path = vec![f(":method", "GET"), f(":scheme", "https"), f(":path", "")];
        assert_eq!(check(no_path, REQUEST), Err(Malformed::MissingPseudo));
        assert_eq!(check(vec![f(":method", "GET")], REQUEST), Err(Malformed::MissingPseudo));
        assert_eq!(check(vec![f(":status", "200")], Section::Trailers), Err(Malformed::Pseudo));
        assert!(check(vec![f("grpc-status", "0")], Section::Trailers).is_ok());
    }

    #[test]
    fn connect_and_extended_connect_follow_8_5_and_rfc_8441() {
        let connect = vec![f(":method", "CONNECT"), f(":authority", "a:443")];
        assert!(check(connect.clone(), REQUEST).is_ok());
        assert_eq!(
            check(with(connect.clone(), f(":path", "/")), REQUEST),
            Err(Malformed::MissingPseudo)
        );
        let extended = vec![
            f(":method", "CONNECT"),
            f(":protocol", "websocket"),
            f(":scheme", "https"),
            f(":path", "/chat"),
            f(":authority", "a"),
        ];
        assert_eq!(check(extended.clone(), REQUEST), Err(Malformed::Pseudo), "not enabled");
        let enabled = Section::Request { connect_protocol: true };
        let head = check(extended, enabled).unwrap();
        assert_eq!(head.pseudo.protocol.as_deref(), Some(&b"websocket"[..]));
        let get_with_protocol = with(get(), f(":protocol", "websocket"));
        assert_eq!(check(get_with_protocol, enabled), Err(Malformed::Pseudo));
    }

    #[test]
    fn responses_need_a_three_digit_status_other_than_101() {
        assert_eq!(
            check(vec![f(":status", "204")], Section::Response).unwrap().pseudo.status,
            Some(204)
        );
        for status in ["20", "2000", "abc", "101", "099"] {
            let field =
                Field { value: Bytes::from(status.as_bytes().to_vec()), ..f(":status", "") };
            assert_eq!(check(vec![field], Section::Response), Err(Malformed::Status), "{status}");
        }
        assert_eq!(check(vec![], Section::Response), Err(Malformed::MissingPseudo));
        assert_eq!(check(vec![f(":path", "/")], Section::Response), Err(Malformed::Pseudo));
    }

    #[test]
    fn content_length_is_digits_and_one_value() {
        let two = with(with(get(), f("content-length", "5")), f("content-length", "5"));
        assert_eq!(check(two, REQUEST).unwrap().content_length, Some(5));
        let differ = with(with(get(), f("content-length", "5")), f("content-length", "6"));
        assert_eq!(check(differ, REQUEST), Err(Malformed::ContentLength));
        for bad in ["", "-1", "1 ", "0x10", "99999999999999999999"] {
            let field =
                Field { value: Bytes::from(bad.as_bytes().to_vec()), ..f("content-length", "") };
            let result = check(with(get(), field), REQUEST);
            assert!(result.is_err(), "{bad:?}");
        }
    }
}
