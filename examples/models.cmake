# Model runtime examples: the built-in demo models on the pipeline, several producer threads
# (text_embedder: the encoder, variable-length token-id items).
gp_example(mlp_classifier ${CMAKE_CURRENT_LIST_DIR}/mlp_classifier.c)
gp_example(image_classifier ${CMAKE_CURRENT_LIST_DIR}/image_classifier.c)
gp_example(text_embedder ${CMAKE_CURRENT_LIST_DIR}/text_embedder.c)
target_link_libraries(mlp_classifier PRIVATE Threads::Threads)
target_link_libraries(image_classifier PRIVATE Threads::Threads)
target_link_libraries(text_embedder PRIVATE Threads::Threads m)
