package classify

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// elevenLabsAnswers are the error answers of ElevenLabs' text-to-speech
// API, by status and detail.status (DESIGN.md §15).
var elevenLabsAnswers = []struct {
	status int
	word   string
}{
	{400, "invalid_request"},
	{401, "invalid_api_key"},
	{401, "quota_exceeded"},
	{403, "missing_permissions"},
	{404, "voice_not_found"},
	{422, "value_error"},
	{429, "system_busy"},
	{429, "too_many_concurrent_requests"},
	{500, "internal_server_error"},
	{502, ""},
	{503, "service_unavailable"},
	{504, ""},
}

// TestElevenLabsClassesGolden: the ElevenLabs family's classification as
// one reviewed table (testdata/elevenlabs_classes.golden): 429 and 5xx
// retryable, 401/403 ours (retryable, counted), 400/404/422 final and not
// counted. ElevenLabs' detail.status never changes a class: the status
// decides, as for the OpenAI family (one classification). A change of any
// row changes who fails over and which breaker counts, so it must show up
// as a golden diff (-update to rewrite).
func TestElevenLabsClassesGolden(t *testing.T) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# status detail.status -> class, breaker, path label (elevenlabs family; DESIGN.md §3, §15)\n")
	for _, x := range elevenLabsAnswers {
		e := NewStatus(x.status)
		breaker := "not counted"
		if e.AboutChannel() {
			breaker = "counted"
		}
		name := x.word
		if name == "" {
			name = "(html)"
		}
		fmt.Fprintf(&buf, "%d %-28s -> %-9s breaker %-11s label %s\n", x.status, name, e.Class(), breaker, e.Label())
	}
	checkGolden(t, "elevenlabs_classes.golden", "the ElevenLabs classification", buf.Bytes())
}

// checkGolden compares got with testdata/name (rewritten with -update).
func checkGolden(t *testing.T, name, what string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (run with -update if intended):\n%s", what, golden, got)
	}
}
