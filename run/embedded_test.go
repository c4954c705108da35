package run

import (
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/refmodel"
)

// TestBaseCoordinationRange: the config accepts exactly what the backend
// does, so a valid config never fails at StartEmbedded.
func TestBaseCoordinationRange(t *testing.T) {
	if config.MinBaseCoordination != refmodel.MinBaseCoordination || config.MaxBaseCoordination != refmodel.MaxBaseCoordination {
		t.Fatalf("config accepts %v to %v, refmodel %v to %v", config.MinBaseCoordination, config.MaxBaseCoordination, refmodel.MinBaseCoordination, refmodel.MaxBaseCoordination)
	}
	cfg := config.Default()
	cfg.Run.Seed = 9
	cfg.Trainer.BaseCoordination = -0.7
	got := EmbeddedOptionsOf(cfg, "/d", nil)
	if got.DataDir != "/d" || got.Seed != 9 || got.BaseCoordination != -0.7 {
		t.Fatalf("EmbeddedOptionsOf: %+v", got)
	}
}
