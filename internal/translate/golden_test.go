package translate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// created is the fixed clock of every golden answer.
const created = 1761841056

// golden compares got with testdata/path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	path = filepath.Join("testdata", path)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the translation (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFileB(b testing.TB, path string) []byte {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return out.Bytes()
}

// requestGolden renders a request translation: the body, then what was
// dropped, or the error.
func requestGolden(t *testing.T, r Request, err error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err != nil {
		var te *Error
		if !asError(err, &te) {
			t.Fatalf("error is not a *translate.Error: %v", err)
		}
		fmt.Fprintf(&b, "error: status=%d code=%s param=%s\n%s\n", te.Status, te.Code, te.Param, te.Message)
		return b.Bytes()
	}
	b.Write(indent(t, r.Body))
	fmt.Fprintf(&b, "\nmodel=%q stream=%v include_usage=%v\ndropped: %s\n", r.Model, r.Stream, r.IncludeUsage, strings.Join(r.Dropped, ", "))
	return b.Bytes()
}

func asError(err error, te **Error) bool {
	e, ok := err.(*Error)
	*te = e
	return ok
}

// sseEvents reads an SSE transcript (as in the SDKs' cassettes) into
// frames.
func sseEvents(t testing.TB, raw []byte) []sse.Frame {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(raw), 0)
	var out []sse.Frame
	for {
		f, err := r.Next()
		if err != nil {
			break
		}
		if !f.HasData {
			continue
		}
		out = append(out, sse.Frame{Event: f.Event, Data: bytes.Clone(f.Data), HasData: true})
	}
	return out
}

// transcript renders a stream translation: each input event, its gate
// classification, then the frames written for it.
type transcoder interface {
	Event(dst []byte, name string, data []byte) ([]byte, gate.Info)
	End(dst []byte) ([]byte, bool)
}

func transcribe(t testing.TB, tc transcoder, events []sse.Frame) (transcript, out []byte) {
	var b bytes.Buffer
	for i, f := range events {
		start := len(out)
		var info gate.Info
		out, info = tc.Event(out, f.Event, f.Data)
		fmt.Fprintf(&b, "#%d in  %s %s\n", i, orDash(f.Event), f.Data)
		fmt.Fprintf(&b, "#%d gate %s", i, info.Kind)
		if info.FinishReason {
			b.WriteString(" finish")
		}
		if info.ToolCalls {
			b.WriteString(" tool_calls")
		}
		if info.Text != nil {
			fmt.Fprintf(&b, " text=%q", info.Text)
		}
		if info.Usage.Present {
			fmt.Fprintf(&b, " usage=%d/%d", info.Usage.InputTokens, info.Usage.OutputTokens)
		}
		if info.Model != "" {
			fmt.Fprintf(&b, " model=%s", info.Model)
		}
		if info.ErrorMessage != "" {
			fmt.Fprintf(&b, " error=%q", info.ErrorMessage)
		}
		b.WriteString("\n")
		for _, line := range strings.SplitAfter(string(out[start:]), "\n") {
			if line != "" {
				b.WriteString("   out " + line)
			}
		}
	}
	start := len(out)
	out, complete := tc.End(out)
	fmt.Fprintf(&b, "end complete=%v\n", complete)
	for _, line := range strings.SplitAfter(string(out[start:]), "\n") {
		if line != "" {
			b.WriteString("   out " + line)
		}
	}
	return b.Bytes(), out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
