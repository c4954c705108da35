package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/server"
)

const watchSynopsis = `Usage: grpo watch [RUN] [--addr URL] [--json]

Connects to a daemon's event stream (/ws) and prints the events of RUN
(default: every run) as they happen, one line each, until the run finishes
or the daemon goes away.
`

func (m *Main) watch(ctx context.Context, args []string) error {
	fs := m.newFlags("watch", watchSynopsis)
	addr := fs.String("addr", "http://"+server.DefaultAddr, "daemon URL")
	asJSON := fs.Bool("json", false, "print each event as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	run := ""
	if fs.NArg() > 0 {
		run = fs.Arg(0)
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
	}
	u, err := url.Parse(*addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--addr %q: want the daemon's URL, e.g. http://127.0.0.1:8080", *addr)
	}
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.Path = strings.TrimRight(u.Path, "/") + "/ws"
	if run != "" {
		u.RawQuery = url.Values{"run": {run}}.Encode()
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", u, err)
	}
	defer conn.Close()
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return fmt.Errorf("daemon closed the stream: %s", ce.Text)
			}
			return fmt.Errorf("read events from %s: %w", u, err)
		}
		var e orchestrator.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		if *asJSON {
			fmt.Fprintln(m.Stdout, string(b))
		} else {
			fmt.Fprintln(m.Stdout, eventLine(e))
		}
		if run != "" && e.Type == orchestrator.EventRunFinished {
			return nil
		}
	}
}

// eventLine formats one event for a terminal.
func eventLine(e orchestrator.Event) string {
	head := fmt.Sprintf("%s %-12s step %2d %-17s", e.Time.Local().Format("15:04:05.000"), e.Run, e.Step, e.Type)
	var tail string
	switch {
	case e.RunStarted != nil:
		d := e.RunStarted
		tail = fmt.Sprintf("steps %d from %d resumed %v", d.Steps, d.From, d.Resumed)
	case e.StepStarted != nil:
		d := e.StepStarted
		tail = fmt.Sprintf("n=%d train episodes %d validation %d", d.N, d.Episodes, d.Validation)
	case e.EpisodeFinished != nil:
		d := e.EpisodeFinished
		tail = fmt.Sprintf("%s %s reward %.3f meals %d deadlocked %v invalid %d", d.Split, d.ID, d.Reward, d.Meals, d.Deadlock, d.Invalid)
	case e.JobState != nil:
		d := e.JobState
		tail = fmt.Sprintf("job %s %s %.0f%%", d.ID, d.State, 100*d.Progress)
	case e.AdapterLoaded != nil:
		tail = fmt.Sprintf("adapter %s", e.AdapterLoaded.Name)
	case e.ValidationDone != nil:
		d := e.ValidationDone
		tail = fmt.Sprintf("reward %.3f deadlock rate %.2f meals %.2f", d.RewardMean, d.DeadlockRate, d.MealsMean)
	case e.BestChanged != nil:
		tail = fmt.Sprintf("best step %d (%.3f)", e.BestChanged.Step, e.BestChanged.Value)
	case e.StepCommitted != nil:
		if t := e.StepCommitted.Train; t != nil {
			tail = fmt.Sprintf("train reward %.3f", t.RewardMean)
		}
	case e.RunFinished != nil:
		tail = e.RunFinished.State
		if msg := e.RunFinished.Error; msg != "" {
			tail += ": " + msg
		}
	}
	return strings.TrimRight(head+" "+tail, " ")
}
