package reqbody

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"strings"
)

// Errors returned by ParseMultipart and RewriteMultipartModel. Their
// messages are written for a client 400.
var (
	ErrMultipart = errors.New("request body is not valid multipart/form-data")
	// ErrAmbiguousPart is a second "model" part (or one in another case, or
	// one whose value a decoder would transform): the upstream could read a
	// different model than the gateway routed on.
	ErrAmbiguousPart = errors.New(`request body has an ambiguous "model" part`)
	// ErrModelValue is an upstream model name that cannot be a form value.
	ErrModelValue = errors.New("model name contains a line break")
)

// Form is what ParseMultipart reads from a multipart/form-data body: the
// "model" field and where its value lies, so it can be rewritten in place.
// It describes one body: pass it only with that body.
type Form struct {
	Model        string
	ModelPresent bool
	Parts        int

	bodyLen int
	model   span // the model part's content
}

// maxBoundary is RFC 2046 §5.1.1's limit on a boundary's length.
const maxBoundary = 70

// ParseMultipart reads a multipart/form-data body (RFC 7578) with the given
// boundary and returns its "model" field. It only locates parts; no part is
// decoded or copied.
//
// It is stricter than most decoders, because what it accepts is forwarded
// to an upstream that parses it again and must see the same model: lines end
// in CRLF, the body starts with the first delimiter (no preamble), ends with
// the close delimiter, header lines are not folded, every
// Content-Disposition parses, and the model part appears once, spelled
// "model", without a Content-Transfer-Encoding that would change its value.
func ParseMultipart(body []byte, boundary string) (Form, error) {
	f := Form{bodyLen: len(body)}
	if boundary == "" || len(boundary) > maxBoundary {
		return f, fmt.Errorf("%w: bad boundary", ErrMultipart)
	}
	dash := "--" + boundary
	delim := []byte("\r\n" + dash) // the delimiter between parts
	if !bytes.HasPrefix(body, []byte(dash)) {
		return f, fmt.Errorf("%w: the body must start with the boundary", ErrMultipart)
	}
	// i is just past a "--boundary" that is a delimiter.
	i := len(dash)
	for {
		rest := body[i:]
		if bytes.HasPrefix(rest, []byte("--")) {
			// Close delimiter: the rest of its line must be blank; lines
			// after it are the epilogue.
			k := 2 + skipLWSP(rest[2:])
			if f.Parts == 0 || k < len(rest) && !bytes.HasPrefix(rest[k:], crlf) {
				return f, fmt.Errorf("%w: bad close delimiter", ErrMultipart)
			}
			return f, nil
		}
		j := skipLWSP(rest)
		if !bytes.HasPrefix(rest[j:], crlf) {
			return f, fmt.Errorf("%w: junk after a boundary", ErrMultipart)
		}
		i += j + len(crlf)
		start := i
		// Part headers, then the content up to the next delimiter.
		hdrEnd, p, err := parsePartHeaders(body, start)
		if err != nil {
			return f, err
		}
		end, next := findDelimiter(body, hdrEnd, delim[len(crlf):], delim)
		if end < 0 {
			return f, fmt.Errorf("%w: a part is not closed by a delimiter", ErrMultipart)
		}
		f.Parts++
		if err := f.notePart(body, p, span{hdrEnd, end}); err != nil {
			return f, err
		}
		i = next
	}
}

var crlf = []byte("\r\n")

// partHeader is what a part's headers say about routing.
type partHeader struct {
	name        string
	named       bool // a Content-Disposition form-data header with a name
	transferEnc string
}

// parsePartHeaders reads header lines from at to the empty line; hdrEnd is
// the first content byte.
func parsePartHeaders(body []byte, at int) (hdrEnd int, p partHeader, err error) {
	dispositions := 0
	for {
		eol := bytes.Index(body[at:], crlf)
		if eol < 0 {
			return 0, p, fmt.Errorf("%w: unterminated part header", ErrMultipart)
		}
		line := body[at : at+eol]
		at += eol + len(crlf)
		if len(line) == 0 {
			return at, p, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) || !validFieldValue(line[colon+1:]) {
			// Folded (obsolete) or malformed lines are rejected: decoders
			// disagree on them.
			return 0, p, fmt.Errorf("%w: malformed part header", ErrMultipart)
		}
		key := string(line[:colon])
		val := strings.Trim(string(line[colon+1:]), " \t")
		switch {
		case strings.EqualFold(key, "Content-Disposition"):
			dispositions++
			if dispositions > 1 {
				return 0, p, fmt.Errorf("%w: a part has two Content-Disposition headers", ErrMultipart)
			}
			disp, params, err := mime.ParseMediaType(val)
			if err != nil {
				return 0, p, fmt.Errorf("%w: bad Content-Disposition", ErrMultipart)
			}
			if disp == "form-data" {
				p.name, p.named = params["name"], true
			}
		case strings.EqualFold(key, "Content-Transfer-Encoding"):
			p.transferEnc = val
		}
	}
}

// notePart records the model part.
func (f *Form) notePart(body []byte, p partHeader, content span) error {
	if !p.named || !strings.EqualFold(p.name, "model") {
		return nil
	}
	if f.ModelPresent || p.name != "model" {
		return fmt.Errorf("%w (the field must appear once, in lower case)", ErrAmbiguousPart)
	}
	switch strings.ToLower(p.transferEnc) {
	case "", "7bit", "8bit", "binary":
	default:
		// Go's mime/multipart decodes quoted-printable: the upstream would
		// read another model than the raw bytes say.
		return fmt.Errorf("%w (Content-Transfer-Encoding %q)", ErrAmbiguousPart, p.transferEnc)
	}
	f.Model = string(body[content.s:content.e])
	f.ModelPresent = true
	f.model = content
	return nil
}

// findDelimiter returns the end of the content that starts at from and the
// index just past the "--boundary" that ends it, or -1. Like Go's
// mime/multipart, "--boundary" followed by anything but LWSP, CR, LF or "--"
// is content, not a delimiter. Go also reads "--boundary" right after the
// header block as the end of an empty part (the blank line lent its CRLF);
// that shape is rejected (-1): a rewritten value would run into the
// boundary, and other decoders read it differently.
func findDelimiter(body []byte, from int, dash, delim []byte) (end, next int) {
	if bytes.HasPrefix(body[from:], dash) && delimiterEnds(body, from+len(dash)) {
		return -1, -1
	}
	for at := from; ; {
		k := bytes.Index(body[at:], delim)
		if k < 0 {
			return -1, -1
		}
		end = at + k
		next = end + len(delim)
		if next >= len(body) {
			return -1, -1
		}
		if delimiterEnds(body, next) {
			return end, next
		}
		at = end + 1
	}
}

// delimiterEnds: the bytes at i may follow a delimiter's boundary.
func delimiterEnds(body []byte, i int) bool {
	if i >= len(body) {
		return false
	}
	switch c := body[i]; {
	case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		return true
	case c == '-':
		return i+1 < len(body) && body[i+1] == '-'
	}
	return false
}

func skipLWSP(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// validFieldValue: no control characters but HTAB (RFC 9110 §5.5); a bare
// CR or LF would be a line break to some decoders.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// isToken: RFC 9110 field-name characters.
func isToken(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return len(b) > 0
}

// RewriteMultipartModel appends body to dst with only the model part's value
// replaced by upstreamModel; every other byte (file parts included) is
// copied unchanged. A body without a model part is copied as it is. f must
// come from ParseMultipart(body, …).
func RewriteMultipartModel(dst, body []byte, f Form, upstreamModel string) ([]byte, error) {
	if f.bodyLen != len(body) {
		panic("reqbody: Form does not describe this body")
	}
	if !f.ModelPresent || upstreamModel == "" {
		return append(dst, body...), nil
	}
	if strings.ContainsAny(upstreamModel, "\r\n") {
		// A line break could forge a delimiter and smuggle a part.
		return dst, ErrModelValue
	}
	dst = append(dst, body[:f.model.s]...)
	dst = append(dst, upstreamModel...)
	return append(dst, body[f.model.e:]...), nil
}
