package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/grpo-dev/grpo/refmodel"
)

// embeddedModel is the served name of the reference backend's base policy.
const embeddedModel = "refmodel"

// embedded is the reference backend started in-process: its inference
// server and its trainer each on a loopback port, as a real deployment
// would have them on two services.
type embedded struct {
	backend      *refmodel.Backend
	inferenceURL string // with /v1
	trainerURL   string
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	errs         []error
	mu           sync.Mutex
	once         sync.Once
}

func startEmbedded(ctx context.Context, dataDir string, seed int64, logger *slog.Logger) (*embedded, error) {
	b, err := refmodel.New(refmodel.Options{DataDir: dataDir, Seed: seed, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	if err := b.Open(); err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	e := &embedded{backend: b}
	ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	serve := func(h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("embedded reference backend: listen on loopback: %w", err)
		}
		srv := &http.Server{Handler: h}
		e.wg.Add(2)
		go func() {
			defer e.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				e.mu.Lock()
				e.errs = append(e.errs, err)
				e.mu.Unlock()
			}
		}()
		go func() {
			defer e.wg.Done()
			<-ctx.Done()
			srv.Close()
		}()
		return "http://" + ln.Addr().String(), nil
	}
	inf, err := serve(b.InferenceHandler())
	if err != nil {
		e.Close()
		return nil, err
	}
	tr, err := serve(b.TrainerHandler())
	if err != nil {
		e.Close()
		return nil, err
	}
	e.inferenceURL, e.trainerURL = inf+"/v1", tr
	return e, nil
}

// Close stops both servers and the backend's workers; safe to call twice.
func (e *embedded) Close() error {
	e.once.Do(func() {
		e.cancel()
		e.wg.Wait()
		if err := e.backend.Close(); err != nil {
			e.errs = append(e.errs, err)
		}
	})
	return errors.Join(e.errs...)
}
