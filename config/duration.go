package config

import (
	"encoding/json"
	"fmt"
	"math"
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

// ParseDuration accepts a Go duration ("60s", "30m", "1h30m") or a plain
// number of seconds ("60", "1.5").
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return seconds(f, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write it like 60s, 30m or 1h30m, or as a number of seconds", s)
	}
	return Duration(d), nil
}

// seconds converts a number of seconds, refusing what time.Duration cannot
// hold.
func seconds(f float64, text string) (Duration, error) {
	ns := f * float64(time.Second)
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, fmt.Errorf("%s seconds is not a duration Go can hold; write it like 60s, 30m or 1h30m", text)
	}
	return Duration(ns), nil
}

// UnmarshalYAML accepts a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration like 60s, 30m or 1h30m, or a number of seconds")
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

// UnmarshalJSON accepts a duration string or a number of seconds; null
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
