package config_test

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

// FuzzParse feeds Parse what a daemon client might post: it must not panic,
// every error must be a *config.Error, and a valid config must read back
// equal from its stored JSON.
func FuzzParse(f *testing.F) {
	design, err := os.ReadFile("testdata/design.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(design)
	f.Add([]byte(""))
	f.Add([]byte(jobs))
	f.Add([]byte(`{"run": {"name": "x", "steps": 2}, "inference": {"request_timeout": 5, "chat_template_kwargs": {"a": [1, {"b": null}]}}}`))
	f.Add([]byte("curriculum: {schedule: '5@0,10@6'}\nvalidation: &v {temperature: 0.5}\ninference: {<<: *v}\n"))
	f.Add([]byte("grpo:\n  grops: 3\n"))
	f.Add([]byte(`{"run": {"name": "a\/b"}, "inference": {"model": "\ud83d\ude00\u0000\t"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Parse(%q) error %T %v, want *config.Error", data, err, err)
			}
			return
		}
		if c.Validate() != nil {
			return
		}
		b := c.JSON()
		got, err := config.Parse(b)
		if err != nil {
			t.Fatalf("Parse(JSON()) of %q: %v\nJSON: %s", data, err, b)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("Parse(JSON()) of %q:\n got %+v\nwant %+v\nJSON: %s", data, got, c, b)
		}
		if got, err := config.FromJSON(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("FromJSON(JSON()) of %q: %+v, %v\nwant %+v\nJSON: %s", data, got, err, c, b)
		}
	})
}
