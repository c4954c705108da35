package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/run"
)

const promoteSynopsis = `Usage: grpo promote RUN [--as NAME] [--step best|last|N] [--db PATH] [--json]
                    [--endpoint URL ... [--api-key-env VAR]]

Loads the selected step's adapter (or --step's) into every inference
endpoint of the run's config under one stable name, RUN-best unless --as
says otherwise, so downstream clients always call the same model. Where the
name is already served it is replaced in place (load_inplace); a server
that does not honour that gets unload then load. Prints what was loaded
where. --as may not be the run's base model's name (inference.model or
trainer.base_model): the adapter would shadow the base model.

A run on the embedded reference backend has no live endpoint once it has
ended: serve its adapters with
  grpo refmodel serve --data-dir grpo.db.data --addr 127.0.0.1:8000
and point promote at it with --endpoint http://127.0.0.1:8000/v1.
--endpoint (repeatable) replaces the run's endpoints; their API key is read
from --api-key-env.
`

// PromoteCommand is `grpo promote`.
type PromoteCommand struct {
	*Main
	db, name, as, apiKeyEnv string
	endpoints               listFlag
	json                    bool
	pick                    promote.Pick
}

// ParseFlags parses the command line of `grpo promote`.
func (c *PromoteCommand) ParseFlags(args []string) error {
	fs := c.newFlags("promote", promoteSynopsis)
	fs.StringVar(&c.db, "db", config.Default().Run.DB, "bbolt store")
	fs.StringVar(&c.as, "as", "", "stable name to serve the adapter under (default RUN-best)")
	step := fs.String("step", "best", "best | last | a step number")
	fs.Var(&c.endpoints, "endpoint", "OpenAI-compatible base URL with /v1 to load into instead of the run's endpoints (repeatable)")
	fs.StringVar(&c.apiKeyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the API key for --endpoint")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("promote needs a run name")
	}
	c.name = fs.Arg(0)
	if err := parse(fs, fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.pick, err = promote.ParsePick(*step); err != nil {
		return usagef("--%v", err)
	}
	if c.as == "" {
		c.as = promote.DefaultName(c.name)
	}
	if err := promote.ValidateName(c.as); err != nil {
		return usagef("--as: %v", err)
	}
	for _, u := range c.endpoints {
		if err := checkURL("endpoint", u, "http://127.0.0.1:8000/v1"); err != nil {
			return err
		}
	}
	return nil
}

// Run loads the adapter and prints where.
func (c *PromoteCommand) Run(ctx context.Context) (err error) {
	defer func() { err = withRunNames(ctx, c.db, c.name, err) }()
	store, err := openStore(c.db)
	if err != nil {
		return err
	}
	cp, err := promote.Resolve(ctx, store, c.name, c.pick)
	if err != nil {
		return err
	}
	if err := promote.CheckName(c.as, cp.Config); err != nil {
		return usagef("--as: %v", err)
	}
	clients, err := run.Admins(cp.Config, c.Getenv, c.endpoints, c.apiKeyEnv)
	if err != nil {
		return err
	}
	res, err := promote.Promote(ctx, clients, c.as, cp)
	if errors.Is(err, promote.ErrNoAdapter) {
		return err
	}
	if c.json {
		if jerr := json.NewEncoder(c.Stdout).Encode(res); jerr != nil {
			return jerr
		}
		return err
	}
	fmt.Fprintf(c.Stdout, "run %s step %d (%s): adapter %s at %s\n", res.Run, res.Step, res.SelectedBy, res.Adapter.Name, res.Adapter.Path)
	tw := newTable(c.Stdout)
	fmt.Fprintln(tw, "ENDPOINT\tNAME\tACTION\tBEFORE")
	for _, e := range res.Endpoints {
		before := e.Before
		if before == "" {
			before = "-"
		}
		action := e.Action
		if e.Error != "" {
			action += ": " + e.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.URL, res.Name, action, before)
	}
	tw.Flush()
	if err == nil {
		fmt.Fprintf(c.Stdout, "clients call model %q\n", res.Name)
	}
	return err
}
