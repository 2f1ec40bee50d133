module github.com/leaseplane/leaseplane

go 1.26
