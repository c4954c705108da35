package inference

import (
	"context"
	"fmt"
)

// Probe checks that baseURL (e.g. http://127.0.0.1:8000/v1) is an
// OpenAI-compatible server: GET {baseURL}/models must answer a JSON model
// list. The error names the URL and what was expected, so a user can fix a
// config that points at the wrong port or forgot the /v1.
func Probe(ctx context.Context, baseURL string) error {
	return NewAdminClient(baseURL, AdminOptions{}).Probe(ctx)
}

// Probe checks that the endpoint is an OpenAI-compatible server, sending
// the client's API key.
func (c *AdminClient) Probe(ctx context.Context) error {
	if _, err := c.models(ctx); err != nil {
		return fmt.Errorf("probe %s: %w", c.base, err)
	}
	return nil
}
