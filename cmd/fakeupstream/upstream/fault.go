package upstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind is the single fault a model name asks for. KindNone is a healthy
// upstream; options (tokens, tool-calls, frame-delay, header-delay) apply
// to every kind.
type Kind int

// The fault kinds, one per grammar word (see the package doc).
const (
	KindNone Kind = iota
	KindStatus
	KindContextLength
	KindContentFilter
	KindReset
	KindNoHeaders
	KindSlowFirstToken
	KindStreamError
	KindStreamErrorEvent
	KindCut
	KindStall
	KindMalformed
	KindNoDone
	KindErrorBody
	KindBadJSON
	KindShortBody
	KindFlap
	KindRejectPrefill
	KindEndlessFrame
	KindEndlessBody
	KindRedirect
	KindStreamErrorAfter
	KindCutBeforeFinish
	KindModelNotReady
)

// kindNames is the grammar word of each kind. KindStatus is written as the
// status number itself ("503") and has no word.
var kindNames = map[Kind]string{
	KindNone:             "none",
	KindStatus:           "status",
	KindContextLength:    "context-length",
	KindContentFilter:    "content-filter",
	KindReset:            "reset",
	KindNoHeaders:        "no-headers",
	KindSlowFirstToken:   "slow-first-token",
	KindStreamError:      "stream-error",
	KindStreamErrorEvent: "stream-error-event",
	KindCut:              "cut",
	KindStall:            "stall",
	KindMalformed:        "malformed",
	KindNoDone:           "no-done",
	KindErrorBody:        "error-body",
	KindBadJSON:          "bad-json",
	KindShortBody:        "short-body",
	KindFlap:             "flap",
	KindRejectPrefill:    "reject-prefill",
	KindEndlessFrame:     "endless-frame",
	KindEndlessBody:      "endless-body",
	KindRedirect:         "redirect",
	KindStreamErrorAfter: "stream-error-after",
	KindCutBeforeFinish:  "cut-before-finish",
	KindModelNotReady:    "model-not-ready",
}

// String returns the grammar word of the kind.
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Limits that keep a typo from turning the fake into a memory or time bomb.
const (
	DefaultTokens = 8
	maxTokens     = 100_000
	maxDuration   = 24 * time.Hour
)

// Fault is a parsed model name: the base model and what the fake must do.
// The zero value of every option means "not set".
type Fault struct {
	Model string // base model name, everything before the first '|'
	Kind  Kind

	Status        int           // KindStatus: 400..599
	RetryAfter    time.Duration // whole seconds; sent when HasRetryAfter
	HasRetryAfter bool          // "429:ra=7"
	Times         int           // fault only the first Times attempts, then healthy; 0 = every attempt
	Duration      time.Duration // slow-first-token, stall, flap (down time)
	Period        time.Duration // flap: period of the down/up cycle; 0 = down once
	Cut           int           // KindCut: content tokens sent before the connection dies
	After         int           // KindStreamErrorAfter: content frames sent before the error frame

	Tokens     int           // answer length; DefaultTokens, or 2*Cut for cut when unset
	ToolCalls  bool          // stream tool_calls deltas (tool_use blocks) instead of content
	FrameDelay time.Duration // per-model override of Options.FrameDelay; 0 = server default
	// HeaderDelay is waited (on Clock) before anything is answered, the
	// fault's own answer included: a provider queueing requests.
	HeaderDelay time.Duration
	Stop        string // "stop=R": the finish_reason / stop_reason R instead of the natural one
	ErrorType   string // "error=T": the error type of an in-stream error (the dialect's default when "")
	CacheWrite  bool   // "cache-write": cache_control tokens are written, not read (Anthropic usage)

	tokensSet bool
}

// ErrFault is wrapped by every ParseFault error, so callers can tell a bad
// fault name from other failures without matching strings.
var ErrFault = errors.New("fakeupstream: bad fault")

func faultErr(model, format string, args ...any) error {
	return fmt.Errorf("%w in model %q: %s", ErrFault, model, fmt.Sprintf(format, args...))
}

// ParseFault parses a model name such as "gpt-4o|429:ra=7" or
// "m|tokens=60|cut=40". A name without '|' is a healthy model. Unknown or
// conflicting words are errors so a typo never passes as a healthy upstream.
func ParseFault(model string) (Fault, error) {
	parts := strings.Split(model, "|")
	f := Fault{Model: parts[0], Tokens: DefaultTokens}
	if f.Model == "" {
		return Fault{}, faultErr(model, "empty base model name")
	}
	var faultWord string
	for _, p := range parts[1:] {
		if p == "" {
			return Fault{}, faultErr(model, "empty option between '|'")
		}
		word, times, err := splitTimes(p)
		if err != nil {
			return Fault{}, faultErr(model, "%q: %v", p, err)
		}
		if times > 0 {
			if f.Times > 0 {
				return Fault{}, faultErr(model, "once/times given twice")
			}
			f.Times = times
		}
		if word == "" { // a bare "once" or "times=N"
			continue
		}
		isFault, err := f.apply(word)
		if err != nil {
			return Fault{}, faultErr(model, "%q: %v", word, err)
		}
		if isFault {
			if faultWord != "" {
				return Fault{}, faultErr(model, "more than one fault (%q and %q); one fault per model name", faultWord, word)
			}
			faultWord = word
		}
	}
	if f.Times > 0 && f.Kind == KindNone {
		return Fault{}, faultErr(model, "once/times without a fault")
	}
	if f.ErrorType != "" && f.Kind != KindStreamError && f.Kind != KindStreamErrorEvent && f.Kind != KindStreamErrorAfter &&
		(f.Kind != KindStatus || f.Status != 429) { // 429|error=T: ElevenLabs' detail.status
		return Fault{}, faultErr(model, "error=%s needs stream-error, stream-error-event, stream-error-after or 429", f.ErrorType)
	}
	if f.Kind == KindStreamErrorAfter && f.tokensSet && f.Tokens <= f.After {
		return Fault{}, faultErr(model, "tokens=%d must exceed stream-error-after=%d", f.Tokens, f.After)
	}
	if f.Kind == KindStreamErrorAfter && !f.tokensSet {
		f.Tokens = max(f.Tokens, f.After+1)
	}
	if f.Kind == KindCut {
		if !f.tokensSet {
			f.Tokens = max(2*f.Cut, 1)
		} else if f.Tokens <= f.Cut {
			return Fault{}, faultErr(model, "tokens=%d must exceed cut=%d, or the stream is never cut", f.Tokens, f.Cut)
		}
	}
	return f, nil
}

// splitTimes strips a "-once"/"-times=N" suffix, or recognises a bare
// "once"/"times=N" (returned with an empty word).
func splitTimes(p string) (word string, times int, err error) {
	switch {
	case p == "once":
		return "", 1, nil
	case strings.HasPrefix(p, "times="):
		n, err := parseCount(strings.TrimPrefix(p, "times="), 1, maxTokens)
		return "", n, err
	case strings.HasSuffix(p, "-once"):
		return strings.TrimSuffix(p, "-once"), 1, nil
	}
	if i := strings.LastIndex(p, "-times="); i >= 0 {
		n, err := parseCount(p[i+len("-times="):], 1, maxTokens)
		return p[:i], n, err
	}
	return p, 0, nil
}

// apply sets one word on f and reports whether it was a fault (as opposed to
// an option).
func (f *Fault) apply(word string) (isFault bool, err error) {
	name, value, hasValue := strings.Cut(word, "=")
	needValue := func() error {
		if !hasValue || value == "" {
			return fmt.Errorf("%s needs a value (%s=...)", name, name)
		}
		return nil
	}
	noValue := func(k Kind) (bool, error) {
		if hasValue {
			return false, fmt.Errorf("%s takes no value", name)
		}
		f.Kind = k
		return true, nil
	}
	switch name {
	case "tokens":
		if err := needValue(); err != nil {
			return false, err
		}
		if f.tokensSet {
			return false, errors.New("tokens given twice")
		}
		f.Tokens, err = parseCount(value, 1, maxTokens)
		f.tokensSet = true
		return false, err
	case "tool-calls":
		if hasValue {
			return false, errors.New("tool-calls takes no value")
		}
		f.ToolCalls = true
		return false, nil
	case "frame-delay":
		if err := needValue(); err != nil {
			return false, err
		}
		f.FrameDelay, err = parseDuration(value)
		return false, err
	case "header-delay":
		if err := needValue(); err != nil {
			return false, err
		}
		if f.HeaderDelay > 0 {
			return false, errors.New("header-delay given twice")
		}
		f.HeaderDelay, err = parseDuration(value)
		return false, err
	case "stop":
		if err := needValue(); err != nil {
			return false, err
		}
		if f.Stop != "" {
			return false, errors.New("stop given twice")
		}
		if !stopReasons[value] {
			return false, fmt.Errorf("unknown stop reason %q (OpenAI: %s; Anthropic: %s)", value, strings.Join(openAIStops, ", "), strings.Join(anthropicStops, ", "))
		}
		f.Stop = value
		return false, nil
	case "error":
		if err := needValue(); err != nil {
			return false, err
		}
		if f.ErrorType != "" {
			return false, errors.New("error given twice")
		}
		if !isIdent(value) {
			return false, fmt.Errorf("error type %q is not an identifier like overloaded_error or throttlingException", value)
		}
		f.ErrorType = value
		return false, nil
	case "cache-write":
		if hasValue {
			return false, errors.New("cache-write takes no value")
		}
		f.CacheWrite = true
		return false, nil
	case "stream-error-after":
		if err := needValue(); err != nil {
			return false, err
		}
		f.Kind = KindStreamErrorAfter
		f.After, err = parseCount(value, 0, maxTokens-1)
		return true, err
	case "cut-before-finish":
		return noValue(KindCutBeforeFinish)
	case "model-not-ready":
		return noValue(KindModelNotReady)
	case "context-length":
		return noValue(KindContextLength)
	case "content-filter":
		return noValue(KindContentFilter)
	case "reset":
		return noValue(KindReset)
	case "no-headers":
		return noValue(KindNoHeaders)
	case "stream-error":
		return noValue(KindStreamError)
	case "stream-error-event":
		return noValue(KindStreamErrorEvent)
	case "malformed":
		return noValue(KindMalformed)
	case "no-done":
		return noValue(KindNoDone)
	case "error-body":
		return noValue(KindErrorBody)
	case "bad-json":
		return noValue(KindBadJSON)
	case "short-body":
		return noValue(KindShortBody)
	case "reject-prefill":
		return noValue(KindRejectPrefill)
	case "endless-frame":
		return noValue(KindEndlessFrame)
	case "endless-body":
		return noValue(KindEndlessBody)
	case "redirect":
		return noValue(KindRedirect)
	case "slow-first-token", "stall":
		if err := needValue(); err != nil {
			return false, err
		}
		f.Kind = KindSlowFirstToken
		if name == "stall" {
			f.Kind = KindStall
		}
		f.Duration, err = parseDuration(value)
		return true, err
	case "cut":
		if err := needValue(); err != nil {
			return false, err
		}
		f.Kind = KindCut
		f.Cut, err = parseCount(value, 0, maxTokens-1)
		return true, err
	case "flap":
		if err := needValue(); err != nil {
			return false, err
		}
		f.Kind = KindFlap
		down, period, hasPeriod := strings.Cut(value, "/")
		if f.Duration, err = parseDuration(down); err != nil {
			return true, err
		}
		if hasPeriod {
			if f.Period, err = parseDuration(period); err != nil {
				return true, err
			}
			if f.Period <= f.Duration {
				return true, fmt.Errorf("flap period %v must exceed the down time %v", f.Period, f.Duration)
			}
		}
		return true, nil
	}
	return f.applyStatus(word)
}

// applyStatus parses "503" or "429:ra=7".
func (f *Fault) applyStatus(word string) (bool, error) {
	code, opt, hasOpt := strings.Cut(word, ":")
	status, err := strconv.Atoi(code)
	if err != nil || len(code) != 3 {
		return false, errors.New("unknown fault or option (see the grammar in `fakeupstream -help`)")
	}
	if status < 400 || status > 599 {
		return false, fmt.Errorf("status %d outside 400..599", status)
	}
	f.Kind, f.Status = KindStatus, status
	if hasOpt {
		ra, ok := strings.CutPrefix(opt, "ra=")
		if !ok {
			return true, fmt.Errorf("unknown status option %q (only ra=SECONDS)", opt)
		}
		secs, err := parseCount(ra, 0, int(maxDuration/time.Second))
		if err != nil {
			return true, err
		}
		f.RetryAfter, f.HasRetryAfter = time.Duration(secs)*time.Second, true
	}
	return true, nil
}

func parseCount(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d outside %d..%d", n, lo, hi)
	}
	return n, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 5s or 250ms", s)
	}
	if d <= 0 || d > maxDuration {
		return 0, fmt.Errorf("duration %v outside (0, %v]", d, maxDuration)
	}
	return d, nil
}

// String renders f in canonical grammar form; ParseFault(f.String()) == f.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(f.Model)
	switch f.Kind {
	case KindNone:
	case KindStatus:
		fmt.Fprintf(&b, "|%d", f.Status)
		if f.HasRetryAfter {
			fmt.Fprintf(&b, ":ra=%d", int(f.RetryAfter/time.Second))
		}
	case KindSlowFirstToken, KindStall:
		fmt.Fprintf(&b, "|%s=%s", f.Kind, f.Duration)
	case KindCut:
		fmt.Fprintf(&b, "|cut=%d", f.Cut)
	case KindStreamErrorAfter:
		fmt.Fprintf(&b, "|stream-error-after=%d", f.After)
	case KindFlap:
		fmt.Fprintf(&b, "|flap=%s", f.Duration)
		if f.Period > 0 {
			fmt.Fprintf(&b, "/%s", f.Period)
		}
	default:
		b.WriteString("|" + f.Kind.String())
	}
	if f.Times > 0 {
		fmt.Fprintf(&b, "|times=%d", f.Times)
	}
	if f.tokensSet {
		fmt.Fprintf(&b, "|tokens=%d", f.Tokens)
	}
	if f.ToolCalls {
		b.WriteString("|tool-calls")
	}
	if f.FrameDelay > 0 {
		fmt.Fprintf(&b, "|frame-delay=%s", f.FrameDelay)
	}
	if f.HeaderDelay > 0 {
		fmt.Fprintf(&b, "|header-delay=%s", f.HeaderDelay)
	}
	if f.Stop != "" {
		b.WriteString("|stop=" + f.Stop)
	}
	if f.ErrorType != "" {
		b.WriteString("|error=" + f.ErrorType)
	}
	if f.CacheWrite {
		b.WriteString("|cache-write")
	}
	return b.String()
}

// active reports whether the fault applies to the n-th attempt (1-based)
// since the fault was set.
func (f Fault) active(n int) bool {
	return f.Kind != KindNone && (f.Times == 0 || n <= f.Times)
}

// The finish reasons of each family that "stop=R" may name. A reason of the
// other family is refused when the request arrives (see Fault.dialectError).
var (
	openAIStops    = []string{"stop", "length", "tool_calls", "content_filter", "function_call"}
	anthropicStops = []string{"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded"}
	stopReasons    = func() map[string]bool {
		m := map[string]bool{}
		for _, r := range append(append([]string{}, openAIStops...), anthropicStops...) {
			m[r] = true
		}
		return m
	}()
)

// isIdent reports whether s is a non-empty run of ASCII letters, digits and
// underscores: an error type such as overloaded_error or throttlingException.
func isIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
