// Package tokens counts the tokens of a prompt locally, for answers that
// need a count no upstream gives: POST /v1/messages/count_tokens on an
// OpenAI-family chain entry, and the input_tokens of a translated
// Anthropic stream's message_start when the upstream reports usage only
// at its end (DESIGN.md §14).
//
// It uses the o200k_base encoding (GPT-4o and later) of
// github.com/pkoukk/tiktoken-go, its BPE ranks embedded in the binary by
// github.com/pkoukk/tiktoken-go-loader: nothing is downloaded at run time
// (tiktoken-go's default loader fetches the ranks over HTTP; this package
// installs the offline one before the first encoding is built, and
// TestNoNetwork holds it to that). The ranks are parsed once, on first
// use (about 0.3 s and 40 MB), not at start.
//
// A count is an estimate: the prompt's text, tool definitions and tool
// inputs are encoded, each message adds the chat format's overhead, and an
// image or a document counts a fixed amount (its size is not known without
// decoding it). It owns no I/O beyond reading its embedded ranks.
package tokens
