// Package jsonscan is a small, allocation-free JSON scanner for the hot path:
// it validates with encoding/json.Valid semantics (same grammar, same 10000
// nesting limit, invalid UTF-8 inside strings accepted) and reports byte spans,
// so callers can read a few fields and splice bytes without decoding or
// re-encoding a document.
//
// It owns JSON syntax only. It knows nothing about OpenAI fields, does no I/O
// and keeps no state between calls. It is internal: reqbody and gate are its
// only users, and its API follows their needs, not an importer's.
package jsonscan
