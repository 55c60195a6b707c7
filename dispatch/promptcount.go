package dispatch

import "github.com/hopgate/hopgate/internal/tokens"

// promptCount is a streamed Anthropic request's input token count, for
// the message_start of a translated stream (DESIGN.md §14, usage up
// front): an OpenAI-family channel reports usage only at the stream's end.
// The count (o200k_base, package tokens) costs about 26 ms per 100 KB of
// prompt, so it runs beside the hop's send and header wait, not before
// them, and once per request whatever the number of hops that need it.
// The goroutine ends on its own: counting reads only the client's body,
// which nothing writes.
type promptCount struct {
	done chan struct{}
	n    int64
}

// promptTokens starts c's count on the first hop that needs it and
// returns it (the same one for every later hop). A function: call has its
// share of methods (TestShape).
func promptTokens(c *call) *promptCount {
	if c.prompt == nil {
		p := &promptCount{done: make(chan struct{})}
		body := c.req.Body
		go func() {
			defer close(p.done)
			if n, err := tokens.Messages(body); err == nil {
				p.n = n
			}
		}()
		c.prompt = p
	}
	return c.prompt
}

// wait returns the count (0 when the body could not be counted).
func (p *promptCount) wait() int64 {
	<-p.done
	return p.n
}
