package dashboards

import (
	"encoding/json"
	"fmt"
)

// JSON returns the failover board exactly as generated/failover.json holds
// it: two-space indented, trailing newline. Go's encoder sorts map keys, so
// the bytes are deterministic.
func JSON() ([]byte, error) { return JSONWith(Options{}) }

// JSONWith is JSON for a board generated with o.
func JSONWith(o Options) ([]byte, error) {
	board, err := FailoverWith(o)
	if err != nil {
		return nil, fmt.Errorf("dashboards: build failover board: %w", err)
	}
	return render(board)
}

func render(v any) ([]byte, error) {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: marshal: %w", err)
	}
	return append(out, '\n'), nil
}

// Files returns every generated file by its name under generated/. The
// generator writes them and the staleness test compares them.
func Files() (map[string][]byte, error) { return FilesWith(Options{}) }

// FilesWith is Files for boards generated with o (not the committed ones
// unless o is zero).
func FilesWith(o Options) (map[string][]byte, error) {
	failover, err := JSONWith(o)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"failover.json": failover}, nil
}
