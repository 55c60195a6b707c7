package classify

import "testing"

// TestBedrockStatus pins each Bedrock Runtime exception at the status the
// AWS SDK's schema gives it (DESIGN.md §3, §8): the exceptions that are a
// verdict on the channel fail over even where their status reads final; a
// client error, or an answer naming no exception, keeps the status's class.
func TestBedrockStatus(t *testing.T) {
	cases := []struct {
		status    int
		exception string
		want      Class
	}{
		{400, "ServiceQuotaExceededException", Retryable}, // our account's quota
		{424, "ModelErrorException", Retryable},           // "try your request again"
		{424, "ModelStreamErrorException", Retryable},
		{429, "ThrottlingException", Retryable},
		{429, "ModelNotReadyException", Retryable},
		{408, "ModelTimeoutException", Retryable},
		{500, "InternalServerException", Retryable},
		{503, "ServiceUnavailableException", Retryable},
		{403, "AccessDeniedException", Retryable}, // our credential: the status already says so
		{400, "ValidationException", Final},
		{404, "ResourceNotFoundException", Final},
		{400, "ConflictException", Final},
		{400, "", Final},
		{424, "", Final},
		{400, "serviceQuotaExceededException", Final}, // the SDK's names are exact
		{503, "ValidationException", Retryable},       // an exception never makes a status final
		{200, "ThrottlingException", Success},
	}
	for _, tc := range cases {
		if got := BedrockStatus(tc.status, tc.exception); got != tc.want {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.exception, got, tc.want)
		}
		e := NewBedrockStatus(tc.status, tc.exception)
		if tc.status >= 400 && e.Class() != tc.want {
			t.Errorf("NewBedrockStatus(%d, %s).Class() = %v, want %v", tc.status, tc.exception, e.Class(), tc.want)
		}
	}
	// The hop still reads as its status on the failover path, and a quota
	// is a verdict on the channel (its account): the breaker counts it.
	if e := NewBedrockStatus(400, "ServiceQuotaExceededException"); e.Label() != "400" || !e.AboutChannel() {
		t.Errorf("quota: label %q, about the channel %v", e.Label(), e.AboutChannel())
	}
	if e := NewBedrockStatus(400, "ValidationException"); e.AboutChannel() {
		t.Error("a ValidationException counts against the channel")
	}
}

// BenchmarkBedrockStatus proves the Bedrock override allocation-free.
func BenchmarkBedrockStatus(b *testing.B) {
	b.ReportAllocs()
	exceptions := [...]string{"ValidationException", "ServiceQuotaExceededException", "ModelErrorException", ""}
	var n int
	for i := 0; b.Loop(); i++ {
		if BedrockStatus(400+i%200, exceptions[i%len(exceptions)]) == Retryable {
			n++
		}
	}
	_ = n
}
