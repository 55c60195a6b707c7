package classify

import (
	"bytes"
	"flag"
	"fmt"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// bedrockExceptions is every exception of aws-sdk-go-v2's
// service/bedrockruntime types, at the status Bedrock Runtime answers it
// with (the InvokeModel and InvokeModelWithResponseStream references).
var bedrockExceptions = []struct {
	status    int
	exception string
}{
	{400, "ConflictException"},
	{400, "ServiceQuotaExceededException"},
	{400, "ValidationException"},
	{403, "AccessDeniedException"},
	{404, "ResourceNotFoundException"},
	{408, "ModelTimeoutException"},
	{424, "ModelErrorException"},
	{424, "ModelStreamErrorException"},
	{429, "ModelNotReadyException"},
	{429, "ThrottlingException"},
	{500, "InternalServerException"},
	{503, "ServiceUnavailableException"},
}

// TestBedrockClassesGolden: the Bedrock family's classification as one
// reviewed table (testdata/bedrock_classes.golden): for every exception the
// SDK knows, at its own status and with no exception named, the class, the
// breaker's view and the failover path's label. A change of any row is a
// change of who fails over and which breaker counts, so it must show up as
// a golden diff (go test ./dispatch/classify -run BedrockClassesGolden -update).
func TestBedrockClassesGolden(t *testing.T) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# status exception -> class, breaker, path label (bedrock family; DESIGN.md §3, §8)\n")
	row := func(status int, exception string) {
		e := NewBedrockStatus(status, exception)
		breaker := "not counted"
		if e.AboutChannel() {
			breaker = "counted"
		}
		name := exception
		if name == "" {
			name = "(none)"
		}
		fmt.Fprintf(&buf, "%d %-30s -> %-9s breaker %-11s label %s\n", status, name, e.Class(), breaker, e.Label())
	}
	for _, x := range bedrockExceptions {
		row(x.status, x.exception)
	}
	for _, s := range []int{400, 403, 404, 408, 424, 429, 500, 503} {
		row(s, "") // each status without the exception's word
	}
	row(400, "serviceQuotaExceededException") // the names are exact
	checkGolden(t, "bedrock_classes.golden", "the Bedrock classification", buf.Bytes())
}
