// Wrapper module for building etcd from go.etcd.io/etcd/server/v3 (see tests/testenv/build).
module kuzk.io/testenv/etcd

go 1.24
