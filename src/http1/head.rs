//! Deciding when the bytes of a message head are worth parsing, so that a head
//! trickling in costs time linear in its size.
//!
//! Most heads arrive whole in one read, so the first look hands the bytes straight to
//! `httparse`. If they were not complete, parsing again from the start on every read
//! would cost time quadratic in the head's size; instead [`HeadScan`] then looks at
//! each new byte once for the empty line that ends the head, and the parser runs again
//! only once it is there. The request line alone is bounded too, so an endless request
//! line is refused early (414).

/// The end of a head as it is found across reads: how far the bytes have been looked at.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeadScan {
    /// Bytes looked at already; a search resumes a little before this, since the empty
    /// line that ends a head may have been split across reads.
    scanned: usize,
    /// Length of the first line, LF included, once its LF has been seen.
    first_line: Option<usize>,
    /// The parser has had its first look.
    looked: bool,
}

/// Whether to parse the bytes at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The first look: parse; the head may or may not be complete.
    First,
    /// The empty line that ends the head has arrived: parse; it is complete.
    Complete,
    /// Not complete yet: wait for more bytes.
    Wait,
}

/// What the bytes at hand say about the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// The head is complete: this many bytes, the empty line included.
    Complete(usize),
    /// More bytes are needed.
    Partial,
}

impl HeadScan {
    /// Whether the head at the start of `buf` (the same head, grown since the last
    /// call) is worth parsing now.
    pub fn look(&mut self, buf: &[u8]) -> Look {
        if !self.looked {
            self.looked = true;
            return Look::First;
        }
        match self.scan(buf) {
            Scan::Complete(_) => Look::Complete,
            Scan::Partial => Look::Wait,
        }
    }

    /// Looks at the bytes of `buf` not looked at before (a buffer holding the head
    /// from its first byte, grown since the last call).
    ///
    /// A head ends with an empty line: LF LF, or LF CR LF (a bare LF as a line end is
    /// accepted as RFC 9112, 2.2 allows; `httparse` decides what else is valid).
    pub fn scan(&mut self, buf: &[u8]) -> Scan {
        let from = self.scanned.saturating_sub(2).min(buf.len());
        let mut at = from;
        while let Some(lf) = buf.get(at..).and_then(|rest| rest.iter().position(|b| *b == b'\n')) {
            let lf = at.saturating_add(lf);
            if self.first_line.is_none() {
                self.first_line = Some(lf.saturating_add(1));
            }
            match (buf.get(lf.saturating_add(1)), buf.get(lf.saturating_add(2))) {
                (Some(b'\n'), _) => return self.found(lf.saturating_add(2)),
                (Some(b'\r'), Some(b'\n')) => return self.found(lf.saturating_add(3)),
                (None, _) | (Some(b'\r'), None) => {
                    // The rest of a possible empty line has not arrived.
                    self.scanned = lf;
                    return Scan::Partial;
                }
                _ => at = lf.saturating_add(1),
            }
        }
        self.scanned = buf.len();
        Scan::Partial
    }

    fn found(&mut self, len: usize) -> Scan {
        self.scanned = len;
        Scan::Complete(len)
    }

    /// Length of the first line (the request or status line), LF included, once it
    /// has ended; `None` while it has not.
    pub fn first_line(&self) -> Option<usize> {
        self.first_line
    }

    /// Bytes looked at so far, for the tests of the linear bound.
    #[cfg(test)]
    pub(crate) fn scanned(&self) -> usize {
        self.scanned
    }

    /// After the parser found the head at the start of `buf` incomplete on `look`:
    /// whether the scan agrees. Where it finds the empty line that ends a head, the two
    /// disagree, and the head is not one to pass on.
    pub fn agrees_incomplete(&mut self, look: Look, buf: &[u8]) -> bool {
        match look {
            Look::First => self.scan(buf) == Scan::Partial,
            Look::Complete => false,
            Look::Wait => true,
        }
    }

    /// Whether nothing of the head has been looked at yet.
    pub fn is_fresh(&self) -> bool {
        !self.looked
    }
}

/// How many bytes of empty lines (CRLF, or a bare LF) `buf` starts with: a server
/// should ignore them before a request line (RFC 9112, 2.2). A CR not followed by LF
/// is not an empty line, and stays for the parser to refuse.
pub fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut at = 0usize;
    loop {
        let rest = buf.get(at..).unwrap_or_default();
        let line = match rest {
            [b'\n', ..] => 1,
            [b'\r', b'\n', ..] => 2,
            _ => return at,
        };
        at = at.saturating_add(line);
    }
}
