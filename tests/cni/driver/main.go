// tests/cni/driver/main.go - cni-driver: drives CNI plugins the way a
// container runtime does, through libcni (Debian's
// golang-github-appc-cni-dev 1.1.2): a conflist, plugin directories, a
// result cache. The tests build it into their work dir with
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$WORK/gocache go build -o $WORK/cni-driver main.go
//
// Usage:
//
//	cni-driver [options] add|check|del|cached CONTAINERID NETNS IFNAME
//	cni-driver [options] -netns-prefix P -count N -parallel K -id-prefix ID bench
//
// add prints the result JSON, check and del print nothing, cached prints the
// cached result. A plugin error is printed as the CNI error JSON
// {"code","msg","details"} on stdout with exit status 1 (2 for usage or
// driver errors). bench adds then deletes N attachments (netns P0..P{N-1},
// ifname eth0), K at a time, and prints each call's latency in ms, one per
// line: "add MS" / "del MS". GC and STATUS are not in libcni 1.1.2; the
// tests run the plugin directly for them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

var (
	conflist    = flag.String("conflist", "", "the network configuration list (JSON .conflist)")
	pluginPath  = flag.String("path", "/usr/lib/cni", "plugin directories, ':' separated")
	cacheDir    = flag.String("cache", "", "libcni's result cache directory (default: libcni's)")
	cniArgs     = flag.String("args", "", "CNI_ARGS as KEY=VALUE;KEY=VALUE")
	portMaps    = flag.String("portmap", "", "portMappings capability: HOSTPORT:CONTAINERPORT[/PROTO][@HOSTIP][,...] (default tcp)")
	netnsPrefix = flag.String("netns-prefix", "", "bench: netns path prefix (index appended)")
	count       = flag.Int("count", 0, "bench: number of attachments")
	parallel    = flag.Int("parallel", 1, "bench: concurrent calls")
	idPrefix    = flag.String("id-prefix", "bench", "bench: container ID prefix (index appended)")
)

func die(code int, format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "cni-driver: "+format+"\n", a...)
	os.Exit(code)
}

// report prints a plugin error as CNI error JSON and exits 1 (libcni wraps
// the plugin's error: "plugin type=... failed (add): %w").
func report(err error) {
	var e *types.Error
	if errors.As(err, &e) {
		out, _ := json.Marshal(e)
		fmt.Println(string(out))
		fmt.Fprintf(os.Stderr, "cni-driver: %v (code %d)\n", e, e.Code)
	} else {
		out, _ := json.Marshal(map[string]interface{}{"code": -1, "msg": err.Error()})
		fmt.Println(string(out))
		fmt.Fprintf(os.Stderr, "cni-driver: %v\n", err)
	}
	os.Exit(1)
}

func runtimeConf(id, netns, ifname string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifname}
	if *cniArgs != "" {
		for _, kv := range strings.Split(*cniArgs, ";") {
			parts := strings.SplitN(kv, "=", 2)
			if len(parts) != 2 {
				die(2, "-args: %q is not KEY=VALUE", kv)
			}
			rt.Args = append(rt.Args, [2]string{parts[0], parts[1]})
		}
	}
	if *portMaps != "" {
		var maps []map[string]interface{}
		for _, m := range strings.Split(*portMaps, ",") {
			// as kubelet builds them (containerd's CRI: hostPort,
			// containerPort, protocol in lower case, hostIP when set)
			hostIP := ""
			if at := strings.LastIndex(m, "@"); at >= 0 {
				m, hostIP = m[:at], m[at+1:]
			}
			proto := "tcp"
			if sl := strings.Index(m, "/"); sl >= 0 {
				m, proto = m[:sl], m[sl+1:]
			}
			hc := strings.SplitN(m, ":", 2)
			if len(hc) != 2 {
				die(2, "-portmap: %q is not HOSTPORT:CONTAINERPORT[/PROTO][@HOSTIP]", m)
			}
			h, err1 := strconv.Atoi(hc[0])
			c, err2 := strconv.Atoi(hc[1])
			if err1 != nil || err2 != nil {
				die(2, "-portmap: %q is not HOSTPORT:CONTAINERPORT[/PROTO][@HOSTIP]", m)
			}
			pm := map[string]interface{}{"hostPort": h, "containerPort": c, "protocol": proto}
			if hostIP != "" {
				pm["hostIP"] = hostIP
			}
			maps = append(maps, pm)
		}
		// libcni puts it in runtimeConfig.portMappings only for a plugin
		// whose configuration declares the capability
		rt.CapabilityArgs = map[string]interface{}{"portMappings": maps}
	}
	return rt
}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: cni-driver [options] add|check|del|cached CONTAINERID NETNS IFNAME\n"+
			"       cni-driver [options] -netns-prefix P -count N -parallel K bench\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *conflist == "" || flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	list, err := libcni.ConfListFromFile(*conflist)
	if err != nil {
		die(2, "%s: %v", *conflist, err)
	}
	paths := strings.Split(*pluginPath, ":")
	var cni *libcni.CNIConfig
	if *cacheDir != "" {
		cni = libcni.NewCNIConfigWithCacheDir(paths, *cacheDir, nil)
	} else {
		cni = libcni.NewCNIConfig(paths, nil)
	}
	ctx := context.Background()
	cmd := flag.Arg(0)
	if cmd == "bench" {
		bench(ctx, cni, list)
		return
	}
	if flag.NArg() != 4 {
		flag.Usage()
		os.Exit(2)
	}
	rt := runtimeConf(flag.Arg(1), flag.Arg(2), flag.Arg(3))
	switch cmd {
	case "add":
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			report(err)
		}
		if err := res.Print(); err != nil {
			die(2, "cannot print the result: %v", err)
		}
		fmt.Println()
	case "check":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			report(err)
		}
	case "del":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			report(err)
		}
	case "cached":
		res, err := cni.GetNetworkListCachedResult(list, rt)
		if err != nil {
			report(err)
		}
		if res == nil {
			die(1, "no cached result for %s/%s", flag.Arg(1), flag.Arg(3))
		}
		if err := res.Print(); err != nil {
			die(2, "cannot print the result: %v", err)
		}
		fmt.Println()
	default:
		flag.Usage()
		os.Exit(2)
	}
}

// bench: every ADD, then every DEL, -parallel at a time; one line per call.
func bench(ctx context.Context, cni *libcni.CNIConfig, list *libcni.NetworkConfigList) {
	if *netnsPrefix == "" || *count <= 0 || *parallel <= 0 {
		die(2, "bench needs -netns-prefix, -count > 0 and -parallel > 0")
	}
	for _, op := range []string{"add", "del"} {
		lat := make([]float64, *count)
		errs := make([]error, *count)
		next := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < *parallel; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					rt := runtimeConf(fmt.Sprintf("%s%d", *idPrefix, i),
						fmt.Sprintf("%s%d", *netnsPrefix, i), "eth0")
					start := time.Now()
					var err error
					if op == "add" {
						_, err = cni.AddNetworkList(ctx, list, rt)
					} else {
						err = cni.DelNetworkList(ctx, list, rt)
					}
					lat[i] = float64(time.Since(start).Microseconds()) / 1000.0
					errs[i] = err
				}
			}()
		}
		for i := 0; i < *count; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		for i := 0; i < *count; i++ {
			if errs[i] != nil {
				die(1, "%s %s%d: %v", op, *idPrefix, i, errs[i])
			}
			fmt.Printf("%s %.3f\n", op, lat[i])
		}
	}
}
