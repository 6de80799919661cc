package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/throttle-go/throttle/internal/clusterslot"
)

// ClusterNodeTimeout is the cluster-node-timeout of the clusters StartCluster
// starts: a master that stops answering for this long is failed over, which
// with the election delays of Redis takes about 1 to 3 seconds in all.
const ClusterNodeTimeout = time.Second

// Cluster is a Redis Cluster of real redis-server processes on loopback:
// three masters, each with one replica. Its methods are safe for concurrent
// use.
type Cluster struct {
	mu    sync.Mutex
	nodes []*clusterNode
	dir   string
}

type clusterNode struct {
	port int
	dir  string
	cmd  *exec.Cmd // nil while killed
}

func (n *clusterNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// Role is the role of a node at the moment it is asked.
type Role string

// The roles of CLUSTER NODES.
const (
	Master  Role = "master"
	Replica Role = "slave"
)

// StartCluster starts a cluster for one test and stops it, every process and
// temporary file, when the test ends. Without redis-server or redis-cli on
// PATH it skips the test, or fails it when CI is set (see InCI).
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := NewCluster()
	if err != nil {
		if InCI() || !errors.Is(err, exec.ErrNotFound) {
			tb.Fatalf("redistest: starting a Redis Cluster: %v", err)
		}
		tb.Skipf("redistest: a Redis Cluster needs redis-server and redis-cli on PATH: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster starts a cluster; the caller must Close it. It returns once
// every node reports cluster_state:ok, every master has its replica attached
// and every node agrees on who serves each slot.
func NewCluster() (*Cluster, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, err
		}
	}
	var lastErr error
	// Another process may take a port between our check and redis-server's
	// bind: start again on new ports.
	for range 3 {
		c, err := newCluster()
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func newCluster() (*Cluster, error) {
	dir, err := os.MkdirTemp("", "redistest-cluster")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ports, err := clusterPorts(6)
	if err != nil {
		c.Close()
		return nil, err
	}
	for i, p := range ports {
		n := &clusterNode{port: p, dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		if err := c.start(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := waitReady(n.addr(), nil, 5*time.Second); err != nil {
			c.Close()
			return nil, fmt.Errorf("node %s: %w", n.addr(), err)
		}
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	// redis-cli waits for ever for the nodes to join; a node that cannot
	// reach another's bus must not hang the test binary.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.WaitHealthy(20 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start runs redis-server for n in its own directory, where it keeps its
// nodes.conf, so that a restarted node rejoins the cluster as it left it.
func (c *Cluster) start(n *clusterNode) error {
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--dir", n.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
		// A replica may take over however long it was cut off: the tests
		// kill masters on purpose and want the failover.
		"--cluster-replica-validity-factor", "0",
		"--repl-diskless-sync-delay", "0",
		"--logfile", filepath.Join(n.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	return nil
}

// clusterPorts picks count loopback ports p such that p and p+10000 (the
// cluster bus) were both free a moment ago. Both lie below Linux's ephemeral
// ports (32768 and up), which outgoing connections and FreePort take.
func clusterPorts(count int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < count; tries++ {
		if tries > 1000 {
			return nil, errors.New("redistest: no free pair of ports for a cluster node")
		}
		p := 20000 + rand.IntN(2768) // bus: 30000-32767
		if seen[p] || seen[p+10000] || seen[p-10000] {
			continue
		}
		if !portFree(p) || !portFree(p+10000) {
			continue
		}
		seen[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Addrs returns the address of every node, masters and replicas, as a
// ClusterClient's seed list.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr())
	}
	return out
}

// Client returns a ClusterClient on the cluster, closed when the test ends,
// with the options the throttle tests use: writes to masters only, MOVED
// followed up to three times (the go-redis defaults).
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeInfo describes a node as CLUSTER NODES shows it from the node itself.
type NodeInfo struct {
	Addr string
	ID   string
	Role Role
	// MasterID is the ID of the node's master, for a replica.
	MasterID string
	Running  bool
}

// Nodes returns what each running node says of itself, plus the killed nodes
// with Running false and no ID or role.
func (c *Cluster) Nodes(ctx context.Context) ([]NodeInfo, error) {
	c.mu.Lock()
	nodes := append([]*clusterNode(nil), c.nodes...)
	running := make([]bool, len(nodes))
	for i, n := range nodes {
		running[i] = n.cmd != nil
	}
	c.mu.Unlock()
	var out []NodeInfo
	for i, n := range nodes {
		info := NodeInfo{Addr: n.addr(), Running: running[i]}
		if running[i] {
			self, err := selfLine(ctx, n.addr())
			if err != nil {
				return nil, err
			}
			info.ID, info.Role, info.MasterID = self[0], Role(flagRole(self[2])), self[3]
			if info.MasterID == "-" {
				info.MasterID = ""
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// selfLine returns the fields of the "myself" line of CLUSTER NODES at addr.
func selfLine(ctx context.Context, addr string) ([]string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	out, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES at %s: %w", addr, err)
	}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.Contains(f[2], "myself") {
			return f, nil
		}
	}
	return nil, fmt.Errorf("CLUSTER NODES at %s: no line for the node itself", addr)
}

func flagRole(flags string) string {
	for f := range strings.SplitSeq(flags, ",") {
		if f == "master" || f == "slave" {
			return f
		}
	}
	return ""
}

// MasterOf returns the address of the master that serves key now.
func (c *Cluster) MasterOf(ctx context.Context, key string) (string, error) {
	for _, addr := range c.Addrs() {
		cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		owners, err := slotOwners(ctx, cl)
		_ = cl.Close()
		if err != nil {
			continue // a killed node
		}
		slot := Slot(key)
		for _, o := range owners {
			if o.start <= slot && slot <= o.end {
				return o.addr, nil
			}
		}
	}
	return "", fmt.Errorf("redistest: no node knows the master of %q", key)
}

// slotOwner is a range of slots and the master that serves it, as one node
// sees it.
type slotOwner struct {
	start, end int
	id, addr   string
}

// slotOwners reads CLUSTER SHARDS from one node.
func slotOwners(ctx context.Context, cl *redis.Client) ([]slotOwner, error) {
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []slotOwner
	for _, sh := range shards {
		var master *redis.Node
		for i := range sh.Nodes {
			if sh.Nodes[i].Role == "master" {
				master = &sh.Nodes[i]
			}
		}
		for _, r := range sh.Slots {
			if master == nil {
				return nil, fmt.Errorf("slots %d-%d have no master", r.Start, r.End)
			}
			out = append(out, slotOwner{int(r.Start), int(r.End), master.ID,
				net.JoinHostPort(master.IP, strconv.Itoa(int(master.Port)))})
		}
	}
	return out, nil
}

// ReplicaOf returns the address of a running replica of the master at addr.
func (c *Cluster) ReplicaOf(ctx context.Context, masterAddr string) (string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	var id string
	for _, n := range nodes {
		if n.Addr == masterAddr {
			id = n.ID
		}
	}
	for _, n := range nodes {
		if n.Running && id != "" && n.MasterID == id {
			return n.Addr, nil
		}
	}
	return "", fmt.Errorf("redistest: no running replica of %s", masterAddr)
}

// Kill kills the node at addr with SIGKILL, as a crash would. Its
// directory stays, so Restart brings it back into the cluster.
func (c *Cluster) Kill(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.addr() == addr {
			if n.cmd == nil {
				return fmt.Errorf("redistest: %s is not running", addr)
			}
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
			n.cmd = nil
			return nil
		}
	}
	return fmt.Errorf("redistest: no node %s", addr)
}

// Restart starts a killed node again on its port; it rejoins the cluster
// with its nodes.conf (a master that was failed over comes back as a
// replica). Call WaitHealthy to wait until it has.
func (c *Cluster) Restart(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.addr() == addr {
			if n.cmd != nil {
				return fmt.Errorf("redistest: %s is running", addr)
			}
			if err := c.start(n); err != nil {
				return err
			}
			return waitReady(addr, nil, 5*time.Second)
		}
	}
	return fmt.Errorf("redistest: no node %s", addr)
}

// WaitHealthy waits until every running node reports cluster_state:ok, sees
// the same master for every slot range, and every master that is running has
// a replica whose link to it is up, or returns the last thing found wrong.
func (c *Cluster) WaitHealthy(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := c.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not healthy after %s: %w", within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var view string
	masters, replicasUp := 0, map[string]int{}
	masterIDs := map[string]bool{}
	c.mu.Lock()
	var addrs []string
	for _, n := range c.nodes {
		if n.cmd != nil {
			addrs = append(addrs, n.addr())
		}
	}
	c.mu.Unlock()
	for _, addr := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = errors.New("cluster_state is not ok")
		}
		var owners []slotOwner
		if err == nil {
			owners, err = slotOwners(ctx, cl)
		}
		var repl string
		if err == nil {
			repl, err = cl.Info(ctx, "replication").Result()
		}
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
		var b strings.Builder
		covered := 0
		for _, o := range owners {
			covered += o.end - o.start + 1
			fmt.Fprintf(&b, "%d-%d:%s ", o.start, o.end, o.id)
			masterIDs[o.id] = true
		}
		if covered != 16384 {
			return fmt.Errorf("node %s: %d slots covered", addr, covered)
		}
		if view == "" {
			view = b.String()
		} else if sortedFields(view) != sortedFields(b.String()) {
			return fmt.Errorf("node %s sees another slot map", addr)
		}
		switch {
		case strings.Contains(repl, "role:master"):
			masters++
			replicasUp[addr] = strings.Count(repl, ",state=online,")
		case strings.Contains(repl, "role:slave"):
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s: link to its master is not up", addr)
			}
		}
	}
	if len(masterIDs) != 3 {
		return fmt.Errorf("%d masters serve slots, want 3", len(masterIDs))
	}
	// Every master with a running replica must see it online; with all six
	// nodes up, that is every master.
	if len(addrs) == 6 {
		for addr, up := range replicasUp {
			if up < 1 {
				return fmt.Errorf("master %s has no replica online", addr)
			}
		}
	}
	return nil
}

func sortedFields(s string) string {
	f := strings.Fields(s)
	for i := range f {
		for j := i + 1; j < len(f); j++ {
			if f[j] < f[i] {
				f[i], f[j] = f[j], f[i]
			}
		}
	}
	return strings.Join(f, " ")
}

// Close kills every node and removes the cluster's files. It is safe to call
// more than once.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
			n.cmd = nil
		}
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}

// Slot returns the Cluster hash slot of key.
func Slot(key string) int { return clusterslot.Of(key) }

var (
	sharedClusterMu sync.Mutex
	sharedCluster   *Cluster
)

// SharedCluster returns the cluster of this test binary, started on first
// use, for tests that do not kill or restart nodes; each must use keys of its
// own. It skips (or fails in CI) like StartCluster. Call StopSharedCluster
// from TestMain after m.Run.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	sharedClusterMu.Lock()
	defer sharedClusterMu.Unlock()
	if sharedCluster != nil {
		return sharedCluster
	}
	c, err := NewCluster()
	if err != nil {
		if InCI() || !errors.Is(err, exec.ErrNotFound) {
			tb.Fatalf("redistest: starting a Redis Cluster: %v", err)
		}
		tb.Skipf("redistest: a Redis Cluster needs redis-server and redis-cli on PATH: %v", err)
	}
	sharedCluster = c
	return c
}

// StopSharedCluster stops the cluster SharedCluster started, if any.
func StopSharedCluster() {
	sharedClusterMu.Lock()
	defer sharedClusterMu.Unlock()
	if sharedCluster != nil {
		sharedCluster.Close()
		sharedCluster = nil
	}
}
