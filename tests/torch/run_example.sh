#!/bin/sh
# run_example.sh EXE DIR: examples/torch_service on DIR's scripted ResNet-18 and images, checked
# against the eager logits there; skipped (77) when torch_example_model could not make them.
exe=$1 dir=$2
if [ ! -f "$dir/resnet18.pt" ]; then
  echo "SKIP: no $dir/resnet18.pt: torch_example_model could not script it (see its output)"
  exit 77
fi
exec "$exe" "$dir/resnet18.pt" "$dir/images.u8" "$dir/logits.f32"
