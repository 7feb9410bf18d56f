package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Secrets returns text with everything that looks like a credential
// replaced by "xxxxx", knowing nothing of the connection strings it may
// quote. It is the one redaction step for free text that leaves the
// process (log lines, dead-letter headers, span status, command errors),
// and works on the text without parsing it, so that a URL that does not
// parse is masked as well. It masks:
//
//   - the password of anything URL-shaped, scheme://user:PASSWORD@host.
//     The password runs to the last '@' before the next white space, so
//     that one holding an unescaped '@', '/', '#' or '%' is masked whole.
//     Without an '@' (url.Parse quotes "amqp://u:pw#x@h" cut at the '#')
//     what follows "user:" is masked unless it is a port number.
//   - the value of every name=value (query, form, key=value connection
//     string; the '=' may be percent-encoded), "name": value (JSON: a
//     string, number, literal, array or object, masked whole), name: value
//     (YAML, headers: to the end of the line) and <name>value</name> (XML)
//     whose name looks like a secret: see [secretName].
//   - credentials after "Authorization:" (any scheme) or "Bearer".
//   - the fragments of a URL that net/url quotes in "invalid port" and
//     "invalid URL escape" errors.
//
// Text without any of these comes back unchanged. A masked value becomes
// "xxxxx", so Secrets(Secrets(s)) == Secrets(s).
func Secrets(text string) string {
	if !strings.ContainsAny(text, "=:%>") { // every form below has one
		return text
	}
	text = maskUserinfo(text)
	text = maskGroup(text, authorization, 1, nil)
	text = maskGroup(text, bearer, 1, nil)
	text = maskGroup(text, param, 2, secretName)
	text = maskGroup(text, jsonField, 2, secretName)
	text = maskJSONValues(text)
	text = maskGroup(text, colonField, 2, colonSecretName)
	text = maskGroup(text, xmlElement, 2, secretName)
	text = maskGroup(text, urlErrorDetail, 1, func(v string) bool { return !isPort(strings.TrimPrefix(v, ":")) })
	return text
}

var (
	// param is name=value, its value single- or double-quoted (key=value
	// connection strings) or running to the next separator, but for a last
	// ':' ("GET /x?token=abc: 404" keeps its colon).
	// The name may be percent-encoded ("access%5Ftoken=").
	param = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.\-])([A-Za-z](?:[A-Za-z0-9_.\-]|%[0-9A-Fa-f]{2})*)[ \t]*(?:=|%3[Dd])[ \t]*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^&\s"';,<>\\]*[^&\s"';,<>\\:])`)
	// jsonField is "name": "value" in a JSON document (a response body).
	jsonField = regexp.MustCompile(`"([A-Za-z][A-Za-z0-9_.\-]*)"\s*:\s*"((?:[^"\\]|\\.)*)"`)
	// jsonOther is "name": followed by a JSON value that is not a string
	// (maskJSONValues finds where it ends).
	jsonOther = regexp.MustCompile(`"([A-Za-z][A-Za-z0-9_.\-]*)"\s*:\s*[\[{\-0-9tfn]`)
	// colonField is name: value outside quotes (YAML, a header line, prose
	// such as "password : x"), the value running to the end of the line.
	// The colon must be followed by a blank, so that host:port and
	// scheme://user:password@ are left to the rules above.
	colonField = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.\-"'])([A-Za-z][A-Za-z0-9_.\-]*)[ \t]*:[ \t]+([^\s](?:[^\r\n]*[^\s])?)`)
	// xmlElement is <name attr...>value</ in an XML document.
	xmlElement = regexp.MustCompile(`<([A-Za-z][A-Za-z0-9_.\-]*)(?:\s[^<>]*)?>([^<]*)</`)
	// authorization is an Authorization header, with or without its
	// scheme word; the credentials run to the end of the token.
	authorization = regexp.MustCompile(`(?i)\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:(?:bearer|basic|digest|token|negotiate)\s+)?([^\s"',;]+)`)
	// bearer is a bearer token anywhere; eight characters at least, so that
	// prose ("bearer token expired") stays readable.
	bearer = regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{8,}=*)`)
	// urlErrorDetail is the part of a URL that net/url's errors quote
	// besides the URL itself: from a password cut short at '#' or '/', or
	// holding a '%'. A numeric port is left alone (the error is then about
	// something else).
	urlErrorDetail = regexp.MustCompile(`invalid (?:port|URL escape) "([^"]*)"`)
)

// SecretName reports whether a header, field or parameter called name
// probably holds a secret, by the rule [Secrets] applies to name=value
// pairs (see secretName): for code that shows named values (a message's
// headers) and must mask the whole value, whatever characters it holds.
func SecretName(name string) bool { return secretName(name) }

// secretName reports whether a parameter named name probably holds a
// secret: percent-decoded, and ignoring case and the separators '-', '_'
// and '.', a name that contains token, secret, password, passwd,
// passphrase, credential, signature, apikey, accesskey, privatekey,
// session, jwt or hmac, or that is key, sig, pwd, pw, pass, auth,
// authorization or ends in auth.
//
// A bare "code" is not one, although OAuth's ?code= is a short-lived
// credential: "code=500" and "exit code=1" are ordinary error text, and
// masking them would hide what went wrong.
func secretName(name string) bool {
	n := strings.ToLower(nameSeparators.Replace(decodeName(name)))
	for _, word := range secretWords {
		if strings.Contains(n, word) {
			return true
		}
	}
	switch n {
	case "key", "sig", "pwd", "pw", "pass", "authorization":
		return true
	}
	return strings.HasSuffix(n, "auth")
}

var (
	nameSeparators = strings.NewReplacer("-", "", "_", "", ".", "")
	secretWords    = []string{"token", "secret", "password", "passwd", "passphrase", "credential", "signature", "apikey", "accesskey", "privatekey", "session", "jwt", "hmac"}
)

// decodeName percent-decodes name, again while that changes it (a name
// escaped twice), a few times at most.
func decodeName(name string) string {
	for range 3 {
		decoded, err := url.PathUnescape(name)
		if err != nil || decoded == name {
			break
		}
		name = decoded
	}
	return name
}

// maskGroup replaces submatch group of every match of re in text by the
// mask, when keep is nil or keep(submatch 1) is true. An empty group is
// left alone.
func maskGroup(text string, re *regexp.Regexp, group int, keep func(string) bool) string {
	var spans [][2]int
	for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
		start, end := m[2*group], m[2*group+1]
		if start < 0 || start == end || (keep != nil && !keep(text[m[2]:m[3]])) {
			continue
		}
		spans = append(spans, [2]int{start, end})
	}
	return splice(text, spans, mask)
}

// splice replaces each span of text (in order, not overlapping) by with.
func splice(text string, spans [][2]int, with string) string {
	if len(spans) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(text[last:sp[0]])
		b.WriteString(with)
		last = sp[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// maskUserinfo masks the password of every scheme://user:password@ in
// text.
func maskUserinfo(text string) string {
	var b strings.Builder
	rest := text
	for {
		start, end, ok := nextUserinfoPassword(rest)
		if !ok {
			break
		}
		b.WriteString(rest[:start])
		b.WriteString(mask)
		rest = rest[end:]
	}
	if b.Len() == 0 {
		return text
	}
	b.WriteString(rest)
	return b.String()
}

// userinfoPassword returns the password of the first URL in s that has
// one.
func userinfoPassword(s string) (string, bool) {
	start, end, ok := nextUserinfoPassword(s)
	return s[start:end], ok
}

// nextUserinfoPassword finds the first scheme://user:password in s and
// returns where its password starts and ends.
func nextUserinfoPassword(s string) (start, end int, ok bool) {
	offset := 0
	for {
		i := strings.Index(s[offset:], "://")
		if i < 0 {
			return 0, 0, false
		}
		i += offset
		offset = i + 3
		if i == 0 || !isSchemeChar(s[i-1]) {
			continue
		}
		user := offset + strings.IndexFunc(s[offset:], func(r rune) bool { return strings.ContainsRune(":/?#@[", r) || isSpace(r) })
		if user < offset || s[user] != ':' {
			continue // no userinfo password here: a host, a path, user@host
		}
		start = user + 1
		token := s[start:min(len(s), start+maxPasswordScan)]
		if n := strings.IndexFunc(token, isSpace); n >= 0 {
			token = token[:n]
		}
		at := strings.LastIndexByte(token, '@')
		if at > 0 {
			return start, start + at, true
		}
		if at == 0 {
			continue // user:@host, an empty password
		}
		// No '@': a port, or a password that its URL's parser cut short.
		p := token
		if n := strings.IndexAny(p, "/?#\"'`\\<>()[]{},;"); n >= 0 {
			p = p[:n]
		}
		if p != "" && !isPort(p) {
			return start, start + len(p), true
		}
	}
}

// maxPasswordScan bounds how far past "user:" the search for the '@' that
// ends a password goes, so that text full of "x://y:" costs linear time.
const maxPasswordScan = 1024

func isSchemeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '.' || c == '-'
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
}

// isPort reports whether p is a port number, maybe followed by the end of a
// sentence.
func isPort(p string) bool {
	p = strings.TrimRight(p, ".:")
	return p != "" && strings.Trim(p, "0123456789") == ""
}

// colonSecretName is secretName for name: value, but for the names whose
// colon form is something else: an Authorization header (whose scheme word
// the authorization rule keeps readable) and a bare "key", which is prose
// in error texts ("duplicate key: ...").
func colonSecretName(name string) bool {
	switch strings.ToLower(name) {
	case "key", "authorization", "proxy-authorization":
		return false
	}
	return secretName(name)
}

// maskJSONValues replaces the value of every "name": value whose name looks
// like a secret and whose value is not a string (jsonField masks those):
// a number, a literal, or a whole array or object, brackets and all, by
// "xxxxx". What a secret-named field holds is the secret, whatever its
// shape.
func maskJSONValues(text string) string {
	var spans [][2]int
	last := 0
	for _, m := range jsonOther.FindAllStringSubmatchIndex(text, -1) {
		start := m[1] - 1 // the value's first character
		if start < last || !secretName(text[m[2]:m[3]]) {
			continue
		}
		last = start + jsonValueLen(text[start:])
		spans = append(spans, [2]int{start, last})
	}
	return splice(text, spans, `"`+mask+`"`)
}

// jsonValueLen is the length of the JSON value s starts with: an array or
// object to its matching bracket (brackets inside strings do not count),
// or else a number or literal to the next delimiter. Unbalanced, it runs
// to the end of s: better too much masked than a secret shown.
func jsonValueLen(s string) int {
	if s[0] != '[' && s[0] != '{' {
		if i := strings.IndexAny(s, ",}] \t\r\n"); i >= 0 {
			return i
		}
		return len(s)
	}
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return len(s)
}
