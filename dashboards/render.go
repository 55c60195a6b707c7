package dashboards

import (
	"encoding/json"
	"fmt"
)

// JSON returns the failover board exactly as generated/failover.json holds
// it: two-space indented, trailing newline. Go's encoder sorts map keys, so
// the bytes are deterministic.
func JSON() ([]byte, error) {
	board, err := Failover()
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
func Files() (map[string][]byte, error) {
	failover, err := JSON()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"failover.json": failover}, nil
}
