package inference

import (
	"context"
	"fmt"
)

// Probe checks that the endpoint is an OpenAI-compatible server: GET
// {base}/models must answer a JSON model list. The error names the URL and
// what was expected, so a user can fix a config that points at the wrong
// port or forgot the /v1. It sends the client's API key.
func (c *AdminClient) Probe(ctx context.Context) error {
	if _, err := c.models(ctx); err != nil {
		return fmt.Errorf("probe %s: %w", c.base, err)
	}
	return nil
}
