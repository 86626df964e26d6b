//! Reading an HTTP/2 origin's response head into the response model: `:status` and
//! the fields become a [`ResponseHead`] whose fields are slices of the header map the
//! engine's field values are shared into, checked by the same rules as an HTTP/1.1 head
//! (`http1::response::check`). An HTTP/2 body is framed by its stream: a declared
//! `content-length`, or the DATA frames until the stream ends.

use crate::http1::response::{self, BadResponse, StatusLine};
use crate::message::{Framing, ResponseHead, Version};

/// The response head of an origin's stream (`status`, and `fields` by
/// [`super::fields::Fields::headers`]); `ended`: the HEADERS frame ended the stream;
/// `head_request`: the request was HEAD.
pub fn decode<'h, 'b>(
    status: u16,
    fields: &'h [httparse::Header<'b>],
    ended: bool,
    head_request: bool,
) -> Result<ResponseHead<'h, 'b>, BadResponse> {
    let line = StatusLine { status, reason: "", version: Version::Http2 };
    let mut head = response::check(line, fields, b"", 0, head_request)?;
    // What HTTP/1.1 would read as "until the close" is, over HTTP/2, until the stream
    // ends: the connection carries on. A head that ended the stream has an empty body:
    // a length of 0, so that a client the response goes to over HTTP/1.1 is told where
    // it ends (a 200 without framing is read until the close).
    head.ends_with_close = false;
    if head.framing == Framing::UntilClose {
        head.framing = if ended { Framing::Length(0) } else { Framing::Stream };
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::http2::fields::Fields;

    fn parts(resp: http::Response<()>) -> (u16, Fields) {
        (resp.status().as_u16(), Fields::of_map(resp.headers()))
    }

    #[test]
    fn a_stream_is_framed_by_its_length_or_its_end() {
        let p = parts(http::Response::builder().header("content-length", "5").body(()).unwrap());
        let f = p.1.headers();
        let head = decode(p.0, &f, false, false).unwrap();
        assert_eq!(head.framing, Framing::Length(5));
        assert!(head.dropped.contains(0), "holdfast writes the framing itself");
        let p = parts(http::Response::builder().header("x-a", "1").body(()).unwrap());
        let f = p.1.headers();
        assert_eq!(decode(p.0, &f, false, false).unwrap().framing, Framing::Stream);
        // A head that ends the stream says the body is empty: a length of 0, which an
        // HTTP/1.1 client is told (without it, a 200 would be read until the close).
        assert_eq!(decode(p.0, &f, true, false).unwrap().framing, Framing::Length(0));
        let head = decode(p.0, &f, false, true).unwrap();
        assert_eq!(head.framing, Framing::Empty, "a response to HEAD has no body");
        assert!(!head.ends_with_close && !head.is_reusable());
    }

    #[test]
    fn the_checks_of_any_response_apply() {
        let p = parts(
            http::Response::builder()
                .header("content-length", "5")
                .header("content-length", "6")
                .body(())
                .unwrap(),
        );
        let f = p.1.headers();
        assert!(matches!(decode(p.0, &f, false, false), Err(BadResponse::InvalidContentLength)));
        let p = parts(
            http::Response::builder()
                .status(204)
                .header("trailer", "x")
                .header("date", "now")
                .body(())
                .unwrap(),
        );
        let f = p.1.headers();
        let head = decode(p.0, &f, false, false).unwrap();
        assert_eq!(head.framing, Framing::Empty);
        assert!(head.trailer_lines.contains(0) && head.has_date);
    }
}
