package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/moby/moby/client"
	"github.com/sourcegraph/conc/pool"
)

// DockerAPI is the part of the Docker Engine API drift reads;
// *client.Client satisfies it.
type DockerAPI interface {
	ContainerList(ctx context.Context, opts client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerInspect(ctx context.Context, id string, opts client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	NetworkInspect(ctx context.Context, id string, opts client.NetworkInspectOptions) (client.NetworkInspectResult, error)
}

// DockerScan checks the containers of a Docker engine that carry the
// policy selector's labels, stopped ones included: a stopped sandbox starts
// again with the same configuration.
type DockerScan struct {
	API    DockerAPI
	Engine *Engine
	// Parallel bounds concurrent inspects.
	Parallel int
	// Source names the engine in findings ("the Docker engine at unix://…").
	Source string
}

// Run lists, inspects and checks the containers into col.
func (d *DockerScan) Run(ctx context.Context, col *Collector) error {
	if d.Parallel <= 0 {
		d.Parallel = 8
	}
	if d.Source == "" {
		d.Source = "the Docker engine"
	}
	before := col.Scanned
	filters := client.Filters{}
	for _, k := range sortedKeys(d.Engine.p.Spec.Selector.MatchLabels) {
		filters.Add("label", k+"="+d.Engine.p.Spec.Selector.MatchLabels[k])
	}
	list, err := d.API.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return fmt.Errorf("list docker containers with labels %s: %w", selectorText(d.Engine.p.Spec.Selector.MatchLabels), err)
	}
	containers := make([]*DockerContainer, len(list.Items))
	var (
		mu       sync.Mutex
		internal = map[string]bool{}
	)
	networkInternal := func(ctx context.Context, name string) (bool, error) {
		mu.Lock()
		v, ok := internal[name]
		mu.Unlock()
		if ok {
			return v, nil
		}
		res, err := d.API.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
		if err != nil {
			return false, fmt.Errorf("inspect network %s: %w", name, err)
		}
		mu.Lock()
		internal[name] = res.Network.Internal
		mu.Unlock()
		return res.Network.Internal, nil
	}
	p := pool.New().WithContext(ctx).WithMaxGoroutines(d.Parallel).WithCancelOnError()
	for i, item := range list.Items {
		p.Go(func(ctx context.Context) error {
			res, err := d.API.ContainerInspect(ctx, item.ID, client.ContainerInspectOptions{})
			if err != nil {
				return fmt.Errorf("inspect container %s: %w", item.ID, err)
			}
			// Decode the raw answer, not moby's struct, so live and offline
			// (`docker inspect` files) go through the same decoder.
			var c DockerContainer
			if err := json.Unmarshal(res.Raw, &c); err != nil {
				return fmt.Errorf("decode container %s: %w", item.ID, err)
			}
			c.NetworkInternal = map[string]bool{}
			for name := range c.NetworkSettings.Networks {
				if name == "none" || name == "host" || name == "bridge" {
					continue
				}
				in, err := networkInternal(ctx, name)
				if err != nil {
					return fmt.Errorf("container %s: %w", c.DisplayName(), err)
				}
				c.NetworkInternal[name] = in
			}
			containers[i] = &c
			return nil
		})
	}
	if err := p.Wait(); err != nil {
		return err
	}
	col.Checked("docker")
	for _, c := range containers {
		col.Add(d.Engine.CheckContainer(c))
	}
	col.RequireFound(d.Engine.p, d.Source, before)
	return nil
}

// CheckInspectFile checks containers read from `docker inspect` output.
func CheckInspectFile(e *Engine, data []byte, source string, col *Collector) error {
	cs, err := ParseDockerInspect(data)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	col.Checked("docker")
	for i := range cs {
		col.Add(e.CheckContainer(&cs[i]))
	}
	return nil
}
