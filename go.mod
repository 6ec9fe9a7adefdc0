module github.com/tolaria-ml/tolaria

go 1.24
