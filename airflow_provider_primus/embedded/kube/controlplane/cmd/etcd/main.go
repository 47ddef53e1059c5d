// Command etcd runs etcd's own server main; the wrapper exists so etcd builds from the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
