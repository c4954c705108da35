package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// String formats d like time.Duration: "1m0s", "30m0s".
var (
	_ yaml.Unmarshaler = (*Duration)(nil)
	_ yaml.Marshaler   = Duration(0)
	_ json.Unmarshaler = (*Duration)(nil)
	_ json.Marshaler   = Duration(0)
	_ fmt.Stringer     = Duration(0)
)

func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration accepts a Go duration ("60s", "30m", "1h30m"). A bare
// number other than 0 is refused: "job_timeout: 30" read as seconds was
// meant as minutes as often as not, so the unit must be written.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f == 0 {
			return 0, nil // no unit needed
		}
		return 0, fmt.Errorf("%s has no unit; write %ss, %sm or %sh", s, s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write it like 60s, 30m or 1h30m", s)
	}
	return Duration(d), nil
}

// UnmarshalYAML accepts a duration string (see ParseDuration).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration like 60s, 30m or 1h30m")
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a duration string (see ParseDuration); null
// leaves d as it is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}
