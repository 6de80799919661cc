//go:build integration

package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestCluster starts a cluster, checks its shape and the slot function
// against the server's, fails a master over and brings it back as a replica.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six redis-server processes")
	}
	ctx := context.Background()
	c := StartCluster(t)
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[Role]int{}
	for _, n := range nodes {
		roles[n.Role]++
	}
	if roles[Master] != 3 || roles[Replica] != 3 {
		t.Fatalf("roles %v, want 3 masters and 3 replicas", roles)
	}

	cc := c.Client(t)
	for i := range 50 {
		key := fmt.Sprintf("throttle:{k%d}", i)
		want, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}

	key := "throttle:{failover}"
	master, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := c.ReplicaOf(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Kill(master); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := c.MasterOf(ctx, key)
		if err == nil && got == replica {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("after 30s the master of %q is %q (%v), want its replica %s", key, got, err, replica)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover of %s to %s took %s", master, replica, time.Since(start).Round(time.Millisecond))
	if err := c.Restart(master); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	nodes, err = c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr == master && n.Role != Replica {
			t.Fatalf("the old master %s came back as %q, want a replica", master, n.Role)
		}
	}
}
