//! The part of Traefik's router rule syntax a container's labels may use, so a compose
//! file written for Traefik routes unchanged: `Host(...)` and `PathPrefix(...)`, joined
//! by `&&` and `||`, with parentheses. Host and PathPrefix take one or more quoted
//! values (backquotes or double quotes). Any other matcher is an error that names it:
//! holdfast routes by host and path prefix only.

/// One way a rule matches: a host (`None`: any) and a path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub host: Option<String>,
    pub path: String,
}

/// A rule with more alternatives than this is refused (`(a || b) && (c || d) && ...`
/// multiplies them).
const MAX_CLAIMS: usize = 64;

/// The claims `rule` makes, one per host and path prefix it matches.
pub fn claims(rule: &str) -> Result<Vec<Claim>, String> {
    let mut parser = Parser { text: rule, pos: 0 };
    let alternatives = parser.or()?;
    parser.skip_space();
    if parser.pos < rule.len() {
        return Err(format!("unexpected {:?} at offset {}", parser.rest(), parser.pos));
    }
    let mut out = Vec::new();
    for all in alternatives {
        let path = all.path.unwrap_or_else(|| "/".into());
        match all.hosts {
            None => out.push(Claim { host: None, path }),
            Some(hosts) => {
                out.extend(hosts.into_iter().map(|h| Claim { host: Some(h), path: path.clone() }))
            }
        }
    }
    out.dedup();
    Ok(out)
}

/// What a conjunction of matchers requires: hosts (`None`: any) and a path prefix.
#[derive(Debug, Clone, Default)]
struct All {
    hosts: Option<Vec<String>>,
    path: Option<String>,
}

impl All {
    /// Both `self` and `other`; `None` when no request can match both.
    fn and(self, other: All) -> Option<All> {
        let hosts = match (self.hosts, other.hosts) {
            (Some(a), Some(b)) => {
                let both: Vec<String> = a.into_iter().filter(|h| b.contains(h)).collect();
                if both.is_empty() {
                    return None;
                }
                Some(both)
            }
            (a, b) => a.or(b),
        };
        let path = match (self.path, other.path) {
            (Some(a), Some(b)) if b.starts_with(&a) => Some(b),
            (Some(a), Some(b)) if a.starts_with(&b) => Some(a),
            (Some(_), Some(_)) => return None,
            (a, b) => a.or(b),
        };
        Some(All { hosts, path })
    }
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Takes `token` if the text goes on with it.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            return true;
        }
        false
    }

    fn or(&mut self) -> Result<Vec<All>, String> {
        let mut out = self.and()?;
        while self.eat("||") {
            out.extend(self.and()?);
            if out.len() > MAX_CLAIMS {
                return Err(format!("more than {MAX_CLAIMS} alternatives"));
            }
        }
        Ok(out)
    }

    fn and(&mut self) -> Result<Vec<All>, String> {
        let mut out = self.atom()?;
        while self.eat("&&") {
            let right = self.atom()?;
            let mut product = Vec::new();
            for a in &out {
                for b in &right {
                    product.extend(a.clone().and(b.clone()));
                }
            }
            if product.len() > MAX_CLAIMS {
                return Err(format!("more than {MAX_CLAIMS} alternatives"));
            }
            out = product;
        }
        Ok(out)
    }

    fn atom(&mut self) -> Result<Vec<All>, String> {
        if self.eat("(") {
            let inner = self.or()?;
            if !self.eat(")") {
                return Err(format!("a '(' is not closed before {:?}", self.rest()));
            }
            return Ok(inner);
        }
        if self.eat("!") {
            return Err("negation ('!') is not supported".into());
        }
        self.skip_space();
        let name_len = self.rest().find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(0);
        let name = self.rest().get(..name_len).unwrap_or("").to_string();
        self.pos += name_len;
        if name.is_empty() {
            return Err(format!(
                "expected a matcher such as Host(`example.com`) at {:?}",
                self.rest()
            ));
        }
        if !self.eat("(") {
            return Err(format!("{name} is not followed by '('"));
        }
        let mut values = vec![self.quoted()?];
        while self.eat(",") {
            values.push(self.quoted()?);
        }
        if !self.eat(")") {
            return Err(format!("{name}( is not closed"));
        }
        match name.as_str() {
            "Host" => Ok(vec![All { hosts: Some(values), path: None }]),
            "PathPrefix" => {
                Ok(values.into_iter().map(|p| All { hosts: None, path: Some(p) }).collect())
            }
            other => Err(format!(
                "the matcher {other}() is not supported (holdfast reads Host() and PathPrefix())"
            )),
        }
    }

    /// A value in backquotes or double quotes.
    fn quoted(&mut self) -> Result<String, String> {
        self.skip_space();
        let rest = self.rest();
        let Some(quote) = rest.chars().next().filter(|c| *c == '`' || *c == '"') else {
            return Err(format!("expected a quoted value at {rest:?}"));
        };
        let body = rest.get(1..).unwrap_or("");
        let Some(end) = body.find(quote) else {
            return Err(format!("a value opened with {quote} is not closed"));
        };
        let value = body.get(..end).unwrap_or("").to_string();
        self.pos += end + 2;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(host: Option<&str>, path: &str) -> Claim {
        Claim { host: host.map(str::to_string), path: path.into() }
    }

    #[test]
    fn hosts_joined_by_or_each_claim_every_path() {
        let got = claims("Host(`a.test`) || Host(`b.test`)").expect("parses");
        assert_eq!(got, [claim(Some("a.test"), "/"), claim(Some("b.test"), "/")]);
    }

    #[test]
    fn host_and_path_prefix_claim_the_prefix_on_the_host() {
        let got = claims("Host(`a.test`) && PathPrefix(`/api`)").expect("parses");
        assert_eq!(got, [claim(Some("a.test"), "/api")]);
    }

    #[test]
    fn several_values_and_parentheses_distribute() {
        let got = claims("(Host(`a.test`, \"b.test\")) && (PathPrefix(`/x`) || PathPrefix(`/y`))")
            .expect("parses");
        assert_eq!(
            got,
            [
                claim(Some("a.test"), "/x"),
                claim(Some("b.test"), "/x"),
                claim(Some("a.test"), "/y"),
                claim(Some("b.test"), "/y"),
            ]
        );
    }

    #[test]
    fn a_path_prefix_alone_claims_it_on_any_host() {
        assert_eq!(claims("PathPrefix(`/static`)").expect("parses"), [claim(None, "/static")]);
    }

    #[test]
    fn contradictions_match_nothing() {
        assert_eq!(claims("Host(`a.test`) && Host(`b.test`)").expect("parses"), []);
        let nested = claims("PathPrefix(`/a`) && PathPrefix(`/a/b`)").expect("parses");
        assert_eq!(nested, [claim(None, "/a/b")]);
    }

    #[test]
    fn other_matchers_and_bad_syntax_are_errors_that_say_what() {
        let cases = [
            ("Host(`a.test`) && Method(`GET`)", "Method() is not supported"),
            ("!Host(`a.test`)", "negation"),
            ("Host(`a.test`", "not closed"),
            ("Host(a.test)", "quoted value"),
            ("Host(`a.test`) extra", "unexpected"),
            ("", "expected a matcher"),
        ];
        for (rule, expected) in cases {
            let err = claims(rule).expect_err(rule);
            assert!(err.contains(expected), "{rule:?}: {err}");
        }
    }

    #[test]
    fn alternatives_are_bounded() {
        let hosts: Vec<String> = (0..9).map(|i| format!("Host(`h{i}.test`)")).collect();
        let paths: Vec<String> = (0..8).map(|i| format!("PathPrefix(`/{i}`)")).collect();
        let rule = format!("({}) && ({})", hosts.join(" || "), paths.join(" || "));
        assert!(claims(&rule).expect_err("too many").contains("alternatives"));
    }
}
