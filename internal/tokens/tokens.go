package tokens

import (
	"encoding/json"
	"errors"
	"sync"

	tiktoken "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding is the name of the encoding counts use.
const Encoding = "o200k_base"

// Overheads of the chat format (OpenAI's published counting recipe): each
// message costs perMessage tokens beyond its content, and the reply is
// primed with replyPriming more.
const (
	perMessage   = 3
	replyPriming = 3
	// perMedia is what an image or a document counts: about what Claude
	// and GPT-4o charge for a picture of a megapixel.
	perMedia = 1600
)

var encoding = sync.OnceValues(func() (*tiktoken.Tiktoken, error) {
	// Before any encoding is built: the default loader downloads.
	tiktoken.SetBpeLoader(loader.NewOfflineLoader())
	return tiktoken.GetEncoding(Encoding)
})

// Text counts the tokens of s.
func Text(s string) (int64, error) {
	enc, err := encoding()
	if err != nil {
		return 0, err
	}
	return int64(len(enc.EncodeOrdinary(s))), nil
}

// ErrBody: the body is not an Anthropic Messages request.
var ErrBody = errors.New("tokens: body is not a Messages request")

type request struct {
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []json.RawMessage `json:"tools"`
}

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
}

// Messages estimates the input tokens of an Anthropic Messages request
// body (a count_tokens body or a request's): system prompt, messages of
// every role, tool definitions.
func Messages(body []byte) (int64, error) {
	var r request
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, errors.Join(ErrBody, err)
	}
	enc, err := encoding()
	if err != nil {
		return 0, err
	}
	c := counter{enc: enc}
	if len(r.System) > 0 && string(r.System) != "null" {
		c.n += perMessage
		c.content(r.System, 0)
	}
	for _, m := range r.Messages {
		c.n += perMessage
		c.text(m.Role)
		c.content(m.Content, 0)
	}
	for _, t := range r.Tools {
		c.text(string(t)) // name, description and schema as sent
	}
	return c.n + replyPriming, nil
}

type counter struct {
	enc *tiktoken.Tiktoken
	n   int64
}

func (c *counter) text(s string) {
	if s != "" {
		c.n += int64(len(c.enc.EncodeOrdinary(s)))
	}
}

// maxDepth bounds tool results nested in tool results.
const maxDepth = 4

// content counts a content value: a string, or an array of blocks.
func (c *counter) content(v json.RawMessage, depth int) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		c.text(s)
		return
	}
	var blocks []block
	if json.Unmarshal(v, &blocks) != nil || depth > maxDepth {
		return
	}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			c.text(b.Text)
		case "tool_use", "server_tool_use":
			c.text(b.Name)
			c.text(string(b.Input))
		case "tool_result":
			c.content(b.Content, depth+1)
		case "image", "document":
			c.n += perMedia
		default:
			// thinking and other blocks: their text, if any
			c.text(b.Text)
		}
	}
}
