module gofixture

go 1.18
